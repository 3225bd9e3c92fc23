/* tokenizer/encode_files.c: see encode_files.h. */
#include "tokenizer/encode_files.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "common/progress.h"
#include "tokenizer/bpe.h"
#include "tokenizer/bpe_io.h"
#include "tokenizer/dataset.h"

int encode_files(const char *out_dir, const char *const *inputs, int n_inputs,
                 const encode_files_opts_t *o, encode_files_stats_t *st, char *err, size_t errlen) {
    memset(st, 0, sizeof *st);
    if (n_inputs <= 0) {
        snprintf(err, errlen, "no input files");
        return BPE_EARG;
    }
    bpe_vocab_t *v = NULL;
    bpe_t *b = NULL;
    dataset_writer_t *w = NULL;
    docread_t *r = NULL;
    bpe_ids_t ids = {0};
    int rc = bpe_vocab_open(&v, o->vocab, err, errlen);
    if (rc < 0) return rc;
    if ((rc = bpe_new(&b, v, err, errlen)) < 0) goto done;
    uint32_t eot = bpe_vocab_special_id(v, BPE_EOT_TEXT);
    if (eot == BPE_NO_RANK) {
        snprintf(err, errlen, "vocabulary %s has no %s token", o->vocab, BPE_EOT_TEXT);
        rc = BPE_EFORMAT;
        goto done;
    }
    /* Open every input first: a missing file should fail before a dataset is created. */
    uint64_t total = 0;
    for (int i = 0; i < n_inputs; i++) {
        if ((rc = docread_open(&r, inputs[i], o->format, err, errlen)) < 0) goto done;
        total += docread_size(r);
        docread_close(&r);
    }
    dataset_meta_t meta = {0};
    meta.vocab_size = bpe_vocab_size(v);
    meta.eot_id = eot;
    snprintf(meta.tokenizer, sizeof meta.tokenizer, "%s", bpe_vocab_name(v));
    bpe_vocab_hash(v, meta.tokenizer_hash);
    size_t k = 0;
    for (int i = 0; i < n_inputs && k + 1 < sizeof meta.source; i++)
        k += snprintf(meta.source + k, sizeof meta.source - k, "%s%s", i ? " " : "", inputs[i]);
    char derr[256];
    if (dataset_writer_open(&w, out_dir, &meta, o->overwrite, derr, sizeof derr) < 0) {
        snprintf(err, errlen, "%s", derr);
        rc = BPE_EIO;
        goto done;
    }
    progress_t pr;
    progress_init(&pr, "encode", "B", total);
    if (!o->progress) pr.enabled = 0;
    uint64_t done_before = 0;
    double t0 = progress_now();
    for (int i = 0; i < n_inputs; i++) {
        if ((rc = docread_open(&r, inputs[i], o->format, err, errlen)) < 0) goto done;
        const char *text;
        size_t len;
        while ((rc = docread_next(r, &text, &len, err, errlen)) > 0) {
            ids.n = 0;
            if ((rc = bpe_encode(b, (const uint8_t *)text, len, o->allow_special ? BPE_ALLOW_SPECIAL : 0, &ids)) < 0) {
                snprintf(err, errlen, "%s: document %llu: encoding failed: %s", inputs[i],
                         (unsigned long long)st->n_docs, bpe_strerror(rc));
                goto done;
            }
            if (o->append_eot && bpe_ids_push(&ids, eot) < 0) {
                rc = BPE_ENOMEM;
                snprintf(err, errlen, "out of memory");
                goto done;
            }
            if (ids.n > UINT32_MAX) {
                rc = BPE_EARG;
                snprintf(err, errlen, "%s: document %llu: over 2^32 tokens", inputs[i], (unsigned long long)st->n_docs);
                goto done;
            }
            if (dataset_writer_add(w, ids.v, (uint32_t)ids.n, len, derr, sizeof derr) < 0) {
                snprintf(err, errlen, "%s", derr);
                rc = BPE_EIO;
                goto done;
            }
            st->n_docs++;
            st->n_tokens += ids.n;
            st->n_bytes += len;
            progress_update(&pr, done_before + docread_offset(r));
        }
        if (rc < 0) goto done;
        st->n_blank += docread_skipped(r);
        done_before += docread_offset(r);
        docread_close(&r);
    }
    progress_finish(&pr, done_before);
    if (dataset_writer_close(&w, derr, sizeof derr) < 0) {
        snprintf(err, errlen, "%s", derr);
        rc = BPE_EIO;
        goto done;
    }
    st->seconds = progress_now() - t0;
    rc = BPE_OK;
done:
    if (w) dataset_writer_abort(&w);
    docread_close(&r);
    bpe_ids_free(&ids);
    bpe_free(&b);
    bpe_vocab_free(&v);
    return rc;
}

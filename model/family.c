/* model/family.c: the registry of model families (see family.h). */
#include "model/family.h"

#include <stdio.h>
#include <string.h>

extern const model_family_t family_llama;
extern const model_family_t family_free;
extern const model_family_t family_ltm;
extern const model_family_t family_mixer, family_mixer_ae, family_llama_ae, family_mixer_mem,
    family_llama_mem;

static const model_family_t *const families[] = {&family_llama, &family_free, &family_ltm,
                                                 &family_mixer, &family_mixer_ae, &family_llama_ae,
                                                 &family_mixer_mem, &family_llama_mem};
#define N_FAMILIES (int)(sizeof families / sizeof families[0])

const model_family_t *family_find(const char *name) {
    for (int i = 0; i < N_FAMILIES; i++)
        if (name && !strcmp(families[i]->name, name)) return families[i];
    return NULL;
}

const model_family_t *family_for_kind(model_kind kind) {
    for (int i = 0; i < N_FAMILIES; i++)
        if (families[i]->kind == kind) return families[i];
    return NULL;
}

/* Derived from the table, so a new family shows up in --help and errors without an edit here. */
const char *family_names(void) {
    static char names[256];
    if (!names[0])
        for (int i = 0; i < N_FAMILIES; i++) {
            size_t n = strlen(names);
            snprintf(names + n, sizeof names - n, "%s%s", i ? ", " : "", families[i]->name);
        }
    return names;
}

int64_t family_param_count(const model_family_t *f, void *m) {
    int n = f->params(m, NULL, 0);
    tensor_view_t v[n > 0 ? n : 1];
    f->params(m, v, n);
    int64_t total = 0;
    for (int i = 0; i < n; i++) total += tensor_numel(&v[i]);
    return total;
}

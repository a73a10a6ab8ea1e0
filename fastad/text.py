"""Text features as fastText defines them, in compiled code (fastad_cy/text.pyx).

- `Dictionary(min_count, min_count_label, word_ngrams, minn, maxn, bucket, label)`:
  built from lines of text in one streamed pass (`build`), it encodes each line to
  the ids of its input rows (`encode`: its words, their character n-grams, the
  hashed word n-grams) and its labels, as fastText's getLine does; a model's input
  table has `input_rows` = nwords + bucket rows.
- `fasttext_hash(word)`: fastText's 32-bit FNV-1a hash (bytes sign-extended, as its
  C++ does); `fasttext_tokens(line)`: the tokens fastText reads from a line, EOS last.
- `subword_table(words, minn, maxn, bucket)`: each word's own row and its character
  n-gram rows (CSR), the input rows of fastText's subword word vectors (`fa.models.FastText`).

The ids equal fastText's own (checked against the `fasttext` package in the tests)
except among words of equal count, whose order fastText's unstable sort leaves open.
"""
from fastad_cy.text import EOS, Dictionary, fasttext_hash, fasttext_tokens, subword_table

__all__ = ["Dictionary", "fasttext_hash", "fasttext_tokens", "subword_table", "EOS"]

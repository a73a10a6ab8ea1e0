"""gensim's Word2Vec tutorial, run against fastad: the calls of gensim's documentation
(`gensim.models.word2vec`'s first example) unchanged, only the imports differ.

Train on gensim's nine-sentence test corpus at construction, save and load the model,
train it on more sentences (words outside its vocabulary are skipped: here all of
them, with a warning, as gensim logs one), look a vector up and the words nearest it,
then save the vectors alone and load them read-only. The files go to a temporary
directory.

Run: python examples/gensim_tutorial.py
"""
import os
import tempfile
import warnings

from fastad.models import Word2Vec          # gensim: from gensim.models import Word2Vec
from fastad.models import KeyedVectors      # gensim: from gensim.models import KeyedVectors

#: gensim.test.utils.common_texts
common_texts = [
    ["human", "interface", "computer"],
    ["survey", "user", "computer", "system", "response", "time"],
    ["eps", "user", "interface", "system"],
    ["system", "human", "system", "eps"],
    ["user", "response", "time"],
    ["trees"],
    ["graph", "trees"],
    ["graph", "minors", "trees"],
    ["graph", "minors", "survey"],
]


def main():
    """Run the tutorial's calls; returns (the vector of 'computer', its 10 nearest words)."""
    here = os.getcwd()
    with tempfile.TemporaryDirectory() as directory:
        os.chdir(directory)
        try:
            model = Word2Vec(sentences=common_texts, vector_size=100, window=5, min_count=1, workers=4)
            model.save("word2vec.model")
            model = Word2Vec.load("word2vec.model")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)      # no word of ["hello", "world"] is known
                model.train([["hello", "world"]], total_examples=1, epochs=1)
            vector = model.wv["computer"]  # get numpy vector of a word
            sims = model.wv.most_similar("computer", topn=10)  # get other similar words

            word_vectors = model.wv
            word_vectors.save("word2vec.wordvectors")
            wv = KeyedVectors.load("word2vec.wordvectors", mmap="r")
            vector = wv["computer"]  # Get numpy vector of a word
        finally:
            os.chdir(here)
    print(f"the vector of 'computer': {vector.shape[0]} numbers, first {[round(float(x), 4) for x in vector[:3]]}")
    print("nearest 'computer':", ", ".join(f"{word} {cosine:.3f}" for word, cosine in sims))
    return vector, sims


if __name__ == "__main__":
    main()

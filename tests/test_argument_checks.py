"""Every public constructor and fit of fastad's models, layers, optimizers, data helpers,
samplers and distributed runs refuses a bad argument (issue 33: no silent wrong results, no
message from deep inside numpy): one row per constructor, argument and bad value, each
asserting the exception type and that the message names the argument and what it got."""
import math

import numpy as np
import pytest
import scipy.sparse as sp

import fastad as fa
from fastad import checks, data, distributed, nn, optim

LIKES = sp.csr_matrix(np.array([[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]]))
FIELDS = {"id": np.arange(3)}
CORPUS = [["a", "b", "c", "a"]] * 5
TOKENS = np.array([0, 1, 2, 0, 1, 2, 0, 1])


def called(function, **fixed):
    """`function` with the arguments that make a valid call, a row's argument added."""
    return lambda **given: function(**{**fixed, **given})


def parameters():
    return [fa.Parameter(np.zeros(3))]


def sgd():
    return optim.SGD(parameters(), lr=0.1)


make_bpr = called(fa.models.BPR, n_users=3, n_items=4, dim=2)
make_two_tower = called(fa.models.TwoTower, user_features=FIELDS, item_features={"id": np.arange(4)},
                        dim=2)


def fit_bpr(**given):
    return make_bpr().fit(LIKES, **given)


def fit_two_tower(**given):
    return make_two_tower().fit(LIKES, **given)


def fit_word2vec(**given):
    return fa.models.Word2Vec(min_count=1, epochs=1).fit(CORPUS, **given)


make_linear = called(nn.Linear, in_features=2, out_features=3)
make_embedding = called(nn.Embedding, num_embeddings=4, embedding_dim=2)
make_embedding_bag = called(nn.EmbeddingBag, num_embeddings=4, embedding_dim=2)
make_lstm_cell = called(nn.LSTMCell, input_size=2, hidden_size=3)
make_layer_norm = called(nn.LayerNorm, normalized_shape=3)
make_conv1d = called(nn.Conv1d, in_channels=2, out_channels=4, kernel_size=3)
make_conv2d = called(nn.Conv2d, in_channels=2, out_channels=4, kernel_size=3)
make_max_pool1d = called(nn.MaxPool1d, kernel_size=2)
make_batch_norm1d = called(nn.BatchNorm1d, num_features=3)
make_attention = called(nn.MultiheadAttention, embed_dim=4, num_heads=2)
make_sgd = called(optim.SGD, params=parameters(), lr=0.1)
make_adagrad = called(optim.Adagrad, params=parameters())
make_adam = called(optim.Adam, params=parameters())
make_rmsprop = called(optim.RMSprop, params=parameters())
make_step_lr = called(optim.StepLR, optimizer=sgd(), step_size=3)
make_cosine_lr = called(optim.CosineAnnealingLR, optimizer=sgd(), T_max=3)
make_warmup_lr = called(optim.LinearWarmup, optimizer=sgd(), warmup_steps=3)
make_decay_lr = called(optim.LinearDecay, optimizer=sgd())
make_clip_grad_norm = called(optim.clip_grad_norm, params=parameters(), max_norm=1.0)
make_planted_preferences = called(data.planted_preferences, n_users=3, n_items=4, n_train=5, n_test=5)
make_planted_interactions = called(data.planted_interactions, n_users=3, n_items=4, per_user=2)
make_train_test_split = called(data.train_test_split, interactions=LIKES)
make_leave_k_out = called(data.leave_k_out, interactions=LIKES)
make_sample_triples = called(data.sample_triples, interactions=LIKES)


def ids(n=1):
    return fa.IndexInput([0] * n)


PAIRS = (np.array([0, 1]), np.array([1, 0]))      # (user ids, item ids)
make_feed_sampler = called(data.FeedSampler, feeds={ids(): np.arange(4)})
make_pairwise_sampler = called(data.PairwiseSampler, interactions=LIKES, users=ids(), pos=ids(),
                               neg=ids())
make_pairwise_sampler_from_ids = called(make_pairwise_sampler, interactions=PAIRS)
make_skip_gram_sampler = called(data.SkipGramSampler, tokens=TOKENS, center=ids(), context=ids(2))
make_cbow_sampler = called(data.CbowSampler, tokens=TOKENS, context=ids(4),
                           weights=fa.Input(np.zeros(4)), target=ids(2), window=2)
make_interactions = called(data.Interactions, interactions=PAIRS)
make_share = called(distributed.share, arrays={"w": np.zeros(2)})
make_run = called(distributed.run, fn=print)

# (what, make, argument, bad value, exception[, how the message shows the value when not its repr])
ROWS = [
    # ------------------------------------------------------------------ models
    ("BPR", make_bpr, "n_users", 0, ValueError),
    ("BPR", make_bpr, "n_users", -3, ValueError),
    ("BPR", make_bpr, "n_users", 2.5, TypeError),
    ("BPR", make_bpr, "n_items", 0, ValueError),
    ("BPR", make_bpr, "n_items", True, TypeError),
    ("BPR", make_bpr, "dim", 0, ValueError),
    ("BPR", make_bpr, "dim", -3, ValueError),
    ("BPR", make_bpr, "dim", "3", TypeError),
    ("BPR", make_bpr, "scale", 0, ValueError),
    ("BPR", make_bpr, "scale", -0.1, ValueError),
    ("BPR", make_bpr, "scale", math.nan, ValueError),
    ("BPR", make_bpr, "scale", "0.1", TypeError),
    ("BPR", make_bpr, "seed", -1, ValueError),
    ("BPR", make_bpr, "seed", 1.5, TypeError),
    ("BPR", make_bpr, "biases", "yes", TypeError),
    ("BPR", make_bpr, "biases", 2, TypeError),
    ("BPR", make_bpr, "dtype", "bogus", TypeError),
    ("BPR", make_bpr, "dtype", np.int32, TypeError),
    ("TwoTower", make_two_tower, "dim", 0, ValueError),
    ("TwoTower", make_two_tower, "dim", True, TypeError),
    ("TwoTower", make_two_tower, "scale", 0, ValueError),
    ("TwoTower", make_two_tower, "seed", -1, ValueError),
    ("BPR.fit", fit_bpr, "epochs", 0, ValueError),
    ("BPR.fit", fit_bpr, "epochs", 2.5, TypeError),
    ("BPR.fit", fit_bpr, "workers", 0, ValueError),
    ("BPR.fit", fit_bpr, "samples", 0, ValueError),
    ("BPR.fit", fit_bpr, "lr", 0, ValueError),
    ("BPR.fit", fit_bpr, "lr", math.inf, ValueError),
    ("BPR.fit", fit_bpr, "lr", True, TypeError),
    ("BPR.fit", fit_bpr, "lr", "0.1", TypeError),
    ("BPR.fit", fit_bpr, "optimizer", "lbfgs", ValueError),
    ("BPR.fit", fit_bpr, "seed", -1, ValueError),
    ("BPR.fit", fit_bpr, "batch_size", 0, ValueError),
    ("BPR.fit", fit_bpr, "negatives", "popular", ValueError),
    ("BPR.fit", fit_bpr, "callback", 3, TypeError),
    ("BPR.fit", fit_bpr, "progress", "bar", TypeError),
    ("BPR.fit", fit_bpr, "start_method", "forkserver-ish", ValueError),
    ("BPR.fit", fit_bpr, "device", "gpu", ValueError),
    ("TwoTower.fit", fit_two_tower, "lr", -1, ValueError),
    ("TwoTower.fit", fit_two_tower, "start_method", 0, ValueError),
    ("Word2Vec", fa.models.Word2Vec, "dim", 0, ValueError),
    ("Word2Vec", fa.models.Word2Vec, "dim", 2.5, TypeError),
    ("Word2Vec", fa.models.Word2Vec, "window", 0, ValueError),
    ("Word2Vec", fa.models.Word2Vec, "window", "5", TypeError),
    ("Word2Vec", fa.models.Word2Vec, "negative", -1, ValueError),
    ("Word2Vec", fa.models.Word2Vec, "min_count", 0, ValueError),
    ("Word2Vec", fa.models.Word2Vec, "epochs", 0, ValueError),
    ("Word2Vec", fa.models.Word2Vec, "workers", 0, ValueError),
    ("Word2Vec", fa.models.Word2Vec, "lr", 0, ValueError),
    ("Word2Vec", fa.models.Word2Vec, "lr", math.nan, ValueError),
    ("Word2Vec", fa.models.Word2Vec, "min_lr", -1, ValueError),
    ("Word2Vec", fa.models.Word2Vec, "sample", -1, ValueError),
    ("Word2Vec", fa.models.Word2Vec, "sample", math.inf, ValueError),
    ("Word2Vec", fa.models.Word2Vec, "sample", "x", TypeError),
    ("Word2Vec", fa.models.Word2Vec, "sg", "yes", TypeError),
    ("Word2Vec", fa.models.Word2Vec, "seed", -1, ValueError),
    ("Word2Vec", fa.models.Word2Vec, "seed", None, TypeError),
    ("Word2Vec.fit", fit_word2vec, "batch_size", 0, ValueError),
    ("Word2Vec.fit", fit_word2vec, "start_method", "bogus", ValueError),
    ("Word2Vec.fit", fit_word2vec, "start_method", 0, ValueError),
    ("Word2Vec.fit", fit_word2vec, "callback", 3, TypeError),
    ("Word2Vec.fit", fit_word2vec, "progress", 3, TypeError),
    ("Word2Vec.fit", fit_word2vec, "device", "gpu", ValueError),
    # ------------------------------------------------------------------ layers
    ("Linear", make_linear, "in_features", 0, ValueError),
    ("Linear", make_linear, "in_features", 2.5, TypeError),
    ("Linear", make_linear, "out_features", True, TypeError),
    ("Linear", make_linear, "bias", "no", TypeError),
    ("Linear", make_linear, "dtype", "bogus", TypeError),
    ("Embedding", make_embedding, "num_embeddings", 0, ValueError),
    ("Embedding", make_embedding, "embedding_dim", -1, ValueError),
    ("Embedding", make_embedding, "padding_idx", 5, ValueError),
    ("Embedding", make_embedding, "padding_idx", 1.5, TypeError),
    ("Embedding", make_embedding, "max_norm", 0, ValueError),
    ("Embedding", make_embedding, "max_norm", -1.0, ValueError),
    ("Embedding", make_embedding, "norm_type", 0, ValueError),
    ("Embedding", make_embedding, "norm_type", "2", ValueError),
    ("EmbeddingBag", make_embedding_bag, "num_embeddings", 0, ValueError),
    ("EmbeddingBag", make_embedding_bag, "mode", "max", ValueError),
    ("EmbeddingBag", make_embedding_bag, "sparse", None, TypeError),
    ("EmbeddingBag", make_embedding_bag, "include_last_offset", "yes", TypeError),
    ("LSTMCell", make_lstm_cell, "input_size", 0, ValueError),
    ("LSTMCell", make_lstm_cell, "hidden_size", 2.5, TypeError),
    ("GRUCell", called(nn.GRUCell, input_size=2, hidden_size=3), "hidden_size", 0, ValueError),
    ("LSTM", called(nn.LSTM, input_size=2, hidden_size=3), "hidden_size", 0, ValueError),
    ("GRU", called(nn.GRU, input_size=2, hidden_size=3), "input_size", -1, ValueError),
    ("LayerNorm", make_layer_norm, "normalized_shape", 0, ValueError),
    ("LayerNorm", make_layer_norm, "eps", 0, ValueError),
    ("LayerNorm", make_layer_norm, "eps", math.inf, ValueError),
    ("LayerNorm", make_layer_norm, "elementwise_affine", "no", TypeError),
    ("Conv1d", make_conv1d, "in_channels", 0, ValueError),
    ("Conv1d", make_conv1d, "groups", 0, ValueError),
    ("Conv1d", make_conv1d, "kernel_size", 0, ValueError),
    ("Conv1d", make_conv1d, "stride", 0, ValueError),
    ("Conv1d", make_conv1d, "stride", 1.5, TypeError),
    ("Conv1d", make_conv1d, "padding", -1, ValueError),
    ("Conv1d", make_conv1d, "dilation", 0, ValueError),
    ("Conv1d", make_conv1d, "bias", "yes", TypeError),
    ("Conv2d", make_conv2d, "kernel_size", (3, 3, 3), ValueError),
    ("Conv2d", make_conv2d, "stride", (1, 0), ValueError),
    ("Conv2d", make_conv2d, "padding", "same", TypeError),
    ("MaxPool1d", make_max_pool1d, "kernel_size", 0, ValueError),
    ("MaxPool1d", make_max_pool1d, "stride", 0, ValueError),
    ("MaxPool1d", make_max_pool1d, "padding", 2, ValueError),
    ("MaxPool2d", called(nn.MaxPool2d, kernel_size=2), "kernel_size", (2,), ValueError),
    ("AvgPool1d", called(nn.AvgPool1d, kernel_size=2), "padding", -1, ValueError),
    ("AvgPool2d", called(nn.AvgPool2d, kernel_size=2), "stride", 1.5, TypeError),
    ("AdaptiveAvgPool2d", nn.AdaptiveAvgPool2d, "output_size", 0, ValueError),
    ("AdaptiveAvgPool2d", nn.AdaptiveAvgPool2d, "output_size", (2, 2, 2), ValueError),
    ("BatchNorm1d", make_batch_norm1d, "num_features", 0, ValueError),
    ("BatchNorm1d", make_batch_norm1d, "momentum", 1.5, ValueError),
    ("BatchNorm1d", make_batch_norm1d, "eps", 0, ValueError),
    ("BatchNorm1d", make_batch_norm1d, "affine", "yes", TypeError),
    ("BatchNorm2d", called(nn.BatchNorm2d, num_features=3), "momentum", -0.1, ValueError),
    ("MultiheadAttention", make_attention, "embed_dim", 0, ValueError),
    ("MultiheadAttention", make_attention, "num_heads", 2.5, TypeError),
    ("MultiheadAttention", make_attention, "bias", "yes", TypeError),
    ("MultiheadAttention", make_attention, "batch_first", None, TypeError),
    ("Dropout", nn.Dropout, "p", 1.0, ValueError),
    ("Dropout", nn.Dropout, "p", -0.1, ValueError),
    ("Dropout", nn.Dropout, "p", True, TypeError),
    ("Dropout", nn.Dropout, "seed", -1, ValueError),
    ("LeakyReLU", nn.LeakyReLU, "negative_slope", "0.1", TypeError),
    ("LeakyReLU", nn.LeakyReLU, "negative_slope", math.nan, ValueError),
    ("LeakyReLU", nn.LeakyReLU, "negative_slope", math.inf, ValueError),
    ("leaky_relu", called(fa.leaky_relu, x=fa.Input([1.0])), "negative_slope", -math.inf, ValueError),
    ("ELU", nn.ELU, "alpha", "1", TypeError),
    ("ELU", nn.ELU, "alpha", math.inf, ValueError),
    ("ELU", nn.ELU, "alpha", math.nan, ValueError),
    ("elu", called(fa.elu, x=fa.Input([1.0])), "alpha", np.float64(math.nan), ValueError, "nan"),
    ("Hardtanh", nn.Hardtanh, "min_val", math.nan, ValueError),
    ("Hardtanh", nn.Hardtanh, "max_val", math.nan, ValueError),
    ("clip", called(fa.clip, x=fa.Input([1.0])), "a_min", math.nan, ValueError),
    ("clip", called(fa.clip, x=fa.Input([1.0]), a_min=0.0), "a_max", math.nan, ValueError),
    ("GELU", nn.GELU, "approximate", "fast", ValueError),
    ("Hardtanh", called(nn.Hardtanh, max_val=1.0), "min_val", 2.0, ValueError),
    ("Softmax", nn.Softmax, "axis", 1.5, TypeError),
    ("Softmax", nn.Softmax, "dim", "x", TypeError),
    ("LogSoftmax", nn.LogSoftmax, "axis", None, TypeError),
    # ------------------------------------------------------------------ optimizers
    ("SGD", make_sgd, "lr", -1, ValueError),
    ("SGD", make_sgd, "lr", True, TypeError),
    ("SGD", make_sgd, "lr", "0.1", TypeError),
    ("SGD", make_sgd, "momentum", 1.0, ValueError),
    ("SGD", make_sgd, "dampening", 2, ValueError),
    ("SGD", make_sgd, "weight_decay", -1, ValueError),
    ("SGD", make_sgd, "nesterov", "yes", TypeError),
    ("Adagrad", make_adagrad, "lr", math.nan, ValueError),
    ("Adagrad", make_adagrad, "eps", 0, ValueError),
    ("Adagrad", make_adagrad, "initial_accumulator_value", -1, ValueError),
    ("Adam", make_adam, "betas", (1.0, 0.9), ValueError, "1.0"),
    ("Adam", make_adam, "betas", (0.9,), TypeError),
    ("Adam", make_adam, "betas", (True, 0.9), TypeError, "True"),
    ("Adam", make_adam, "eps", 0, ValueError),
    ("Adam", make_adam, "weight_decay", True, TypeError),
    ("AdamW", called(optim.AdamW, params=parameters()), "weight_decay", -0.1, ValueError),
    ("RMSprop", make_rmsprop, "alpha", 1.5, ValueError),
    ("RMSprop", make_rmsprop, "momentum", -1, ValueError),
    ("Adadelta", called(optim.Adadelta, params=parameters()), "rho", 1.5, ValueError),
    ("Adamax", called(optim.Adamax, params=parameters()), "betas", (0.9, 1.0), ValueError, "1.0"),
    ("NAdam", called(optim.NAdam, params=parameters()), "momentum_decay", -1, ValueError),
    ("RAdam", called(optim.RAdam, params=parameters()), "decoupled_weight_decay", "yes", TypeError),
    ("StepLR", make_step_lr, "step_size", 0, ValueError),
    ("StepLR", make_step_lr, "step_size", 2.5, TypeError),
    ("StepLR", make_step_lr, "gamma", -1, ValueError),
    ("StepLR", make_step_lr, "optimizer", "sgd", TypeError),
    ("CosineAnnealingLR", make_cosine_lr, "T_max", 0, ValueError),
    ("CosineAnnealingLR", make_cosine_lr, "eta_min", -1, ValueError),
    ("LinearWarmup", make_warmup_lr, "warmup_steps", 0, ValueError),
    ("LinearWarmup", make_warmup_lr, "start_factor", 1.5, ValueError),
    ("LinearDecay", make_decay_lr, "min_lr", -1, ValueError),
    ("LinearDecay", make_decay_lr, "total_steps", 0, ValueError),
    ("LinearDecay", make_decay_lr, "optimizer", None, TypeError),
    ("clip_grad_norm", make_clip_grad_norm, "max_norm", -1, ValueError),
    ("clip_grad_norm", make_clip_grad_norm, "norm_type", 0, ValueError),
    ("clip_grad_value", called(optim.clip_grad_value, params=parameters()), "clip_value", -1,
     ValueError),
    # ------------------------------------------------------------------ data helpers
    ("planted_preferences", make_planted_preferences, "n_users", 0, ValueError),
    ("planted_preferences", make_planted_preferences, "n_items", 1, ValueError),
    ("planted_preferences", make_planted_preferences, "n_items", 2.5, TypeError),
    ("planted_preferences", make_planted_preferences, "n_train", -3, ValueError),
    ("planted_preferences", make_planted_preferences, "n_test", 2.5, TypeError),
    ("planted_preferences", make_planted_preferences, "rank", 0, ValueError),
    ("planted_preferences", make_planted_preferences, "noise", -1, ValueError),
    ("planted_preferences", make_planted_preferences, "seed", -1, ValueError),
    ("planted_interactions", make_planted_interactions, "n_users", 0, ValueError),
    ("planted_interactions", make_planted_interactions, "n_items", 2.5, TypeError),
    ("planted_interactions", make_planted_interactions, "per_user", 0, ValueError),
    ("planted_interactions", make_planted_interactions, "per_user", True, TypeError),
    ("planted_interactions", make_planted_interactions, "rank", -1, ValueError),
    ("planted_interactions", make_planted_interactions, "noise", math.nan, ValueError),
    ("planted_interactions", make_planted_interactions, "seed", 1.5, TypeError),
    ("train_test_split", make_train_test_split, "test_fraction", 0, ValueError),
    ("train_test_split", make_train_test_split, "test_fraction", 1, ValueError),
    ("train_test_split", make_train_test_split, "test_fraction", True, TypeError),
    ("train_test_split", make_train_test_split, "seed", -1, ValueError),
    ("leave_k_out", make_leave_k_out, "k", 0, ValueError),
    ("leave_k_out", make_leave_k_out, "seed", 1.5, TypeError),
    ("sample_triples", make_sample_triples, "n", 0, ValueError),
    ("sample_triples", make_sample_triples, "negatives", "popular", ValueError),
    ("sample_triples", make_sample_triples, "seed", -1, ValueError),
    # ------------------------------------------------------------------ samplers
    ("FeedSampler", make_feed_sampler, "shuffle", "yes", TypeError),
    ("FeedSampler", make_feed_sampler, "shuffle", 2, TypeError),
    ("FeedSampler", make_feed_sampler, "shuffle", None, TypeError),
    ("FeedSampler", make_feed_sampler, "seed", -1, ValueError),
    ("FeedSampler", make_feed_sampler, "seed", 1.5, TypeError),
    ("FeedSampler", make_feed_sampler, "seed", "0", TypeError),
    ("FeedSampler", make_feed_sampler, "seed", True, TypeError),
    ("FeedSampler", make_feed_sampler, "seed", [1, -2], ValueError),
    ("FeedSampler", make_feed_sampler, "seed", [1, 2.5], TypeError),
    ("FeedSampler", make_feed_sampler, "rank", -1, ValueError),
    ("FeedSampler", make_feed_sampler, "rank", 1, ValueError),
    ("FeedSampler", make_feed_sampler, "workers", 0, ValueError),
    ("FeedSampler", make_feed_sampler, "workers", 1.5, TypeError),
    ("PairwiseSampler", make_pairwise_sampler, "sample", "items", ValueError),
    ("PairwiseSampler", make_pairwise_sampler, "sample", True, ValueError),
    ("PairwiseSampler", make_pairwise_sampler, "negatives", "popular", ValueError),
    ("PairwiseSampler", make_pairwise_sampler, "examples", 0, ValueError),
    ("PairwiseSampler", make_pairwise_sampler, "examples", 2.5, TypeError),
    ("PairwiseSampler", make_pairwise_sampler_from_ids, "n_users", 0, ValueError),
    ("PairwiseSampler", make_pairwise_sampler_from_ids, "n_items", 2.5, TypeError),
    ("PairwiseSampler", make_pairwise_sampler, "seed", -1, ValueError),
    ("PairwiseSampler", make_pairwise_sampler, "seed", 2.5, TypeError),
    ("PairwiseSampler", make_pairwise_sampler, "rank", -1, ValueError),
    ("PairwiseSampler", make_pairwise_sampler, "workers", "2", TypeError),
    ("Interactions", make_interactions, "n_users", 0, ValueError),
    ("Interactions", make_interactions, "n_items", True, TypeError),
    ("SkipGramSampler", make_skip_gram_sampler, "sample", True, TypeError),
    ("SkipGramSampler", make_skip_gram_sampler, "sample", "1e-3", TypeError),
    ("SkipGramSampler", make_skip_gram_sampler, "sample", -1, ValueError),
    ("SkipGramSampler", make_skip_gram_sampler, "sample", math.nan, ValueError),
    ("SkipGramSampler", make_skip_gram_sampler, "sample", math.inf, ValueError),
    ("SkipGramSampler", make_skip_gram_sampler, "ns_exponent", True, TypeError),
    ("SkipGramSampler", make_skip_gram_sampler, "ns_exponent", "0.75", TypeError),
    ("SkipGramSampler", make_skip_gram_sampler, "ns_exponent", math.nan, ValueError),
    ("SkipGramSampler", make_skip_gram_sampler, "window", 0, ValueError),
    ("SkipGramSampler", make_skip_gram_sampler, "window", 2.5, TypeError),
    ("SkipGramSampler", make_skip_gram_sampler, "vocab_size", 0, ValueError),
    ("SkipGramSampler", make_skip_gram_sampler, "vocab_size", 3.0, TypeError),
    ("SkipGramSampler", make_skip_gram_sampler, "block_tokens", 0, ValueError),
    ("SkipGramSampler", make_skip_gram_sampler, "block_tokens", 1.5, TypeError),
    ("SkipGramSampler", make_skip_gram_sampler, "claim", "x", TypeError),
    ("SkipGramSampler", make_skip_gram_sampler, "mask", "x", TypeError),
    ("SkipGramSampler", make_skip_gram_sampler, "seed", -1, ValueError),
    ("SkipGramSampler", make_skip_gram_sampler, "seed", 2.5, TypeError),
    ("SkipGramSampler", make_skip_gram_sampler, "rank", -1, ValueError),
    ("SkipGramSampler", make_skip_gram_sampler, "workers", 0, ValueError),
    ("CbowSampler", make_cbow_sampler, "window", 0, ValueError),
    ("CbowSampler", make_cbow_sampler, "window", 2.0, TypeError),
    ("CbowSampler", make_cbow_sampler, "weights", "x", TypeError),
    ("CbowSampler", make_cbow_sampler, "sample", np.bool_(True), TypeError, "True"),
    ("CbowSampler", make_cbow_sampler, "ns_exponent", -math.inf, ValueError),
    ("CbowSampler", make_cbow_sampler, "seed", -1, ValueError),
    ("CbowSampler", make_cbow_sampler, "block_tokens", -5, ValueError),
    # ------------------------------------------------------------------ distributed (checked before Ray)
    ("share", make_share, "shards", 0, ValueError),
    ("share", make_share, "shards", 2.0, TypeError),
    ("share", make_share, "shards", True, TypeError),
    ("share", make_share, "checkpoint_every", 0, ValueError),
    ("share", make_share, "checkpoint_every", "5", TypeError),
    ("share", make_share, "shard_restarts", -1, ValueError),
    ("share", make_share, "shard_restarts", 1.5, TypeError),
    ("restore", called(distributed.restore, path="nowhere"), "shards", "2", TypeError),
    ("run", make_run, "workers", 0, ValueError),
    ("run", make_run, "workers", 2.5, TypeError),
    ("run", make_run, "sync_every", 0, ValueError),
    ("run", make_run, "sync_every", 2.5, TypeError),
    ("run", make_run, "sync_seconds", 0, ValueError),
    ("run", make_run, "sync_seconds", "1", TypeError),
    ("run", make_run, "sync_timeout", math.nan, ValueError),
    ("run", make_run, "sync_timeout", True, TypeError),
    ("run", make_run, "timeout", -1, ValueError),
    ("run", make_run, "timeout", math.inf, ValueError),
    ("run", make_run, "max_restarts", -1, ValueError),
    ("run", make_run, "max_restarts", True, TypeError),
]


def shown(value):
    return value.__name__ if isinstance(value, type) else repr(value)


@pytest.mark.parametrize("make,argument,value,error,text", [
    pytest.param(make, argument, value, error, how[0] if how else shown(value),
                 id=f"{what}-{argument}={shown(value)}")
    for what, make, argument, value, error, *how in ROWS])
def test_a_bad_argument_is_refused_naming_it_and_what_it_got(make, argument, value, error, text):
    with pytest.raises(error) as caught:
        make(**{argument: value})
    message = str(caught.value)
    assert type(caught.value) is error, message       # not a subclass numpy raised deep inside
    assert argument in message and text in message, message


def test_bpr_refuses_given_factors_that_do_not_fit():
    with pytest.raises(ValueError, match=r"BPR: U and V must be non-empty .* got shapes \(3,\) and "
                                         r"\(4, 2\)"):
        fa.models.BPR(3, 4, dim=2, U=np.zeros(3))
    with pytest.raises(ValueError, match=r"got shapes \(3, 2\) and \(4, 5\)"):
        fa.models.BPR(3, 4, U=np.zeros((3, 2)), V=np.zeros((4, 5)))


def test_a_zero_dim_bpr_no_longer_trains_to_nothing():
    # BPR(n, m, dim=0) once "trained" (loss log 2 every epoch, every score 0)
    with pytest.raises(ValueError, match="BPR: dim must be >= 1, got 0"):
        fa.models.BPR(3, 4, dim=0)
    with pytest.raises(ValueError, match=r"BPR: scale must be a finite number > 0, got 0"):
        fa.models.BPR(3, 4, scale=0)


def test_the_options_lists_name_every_accepted_value():
    with pytest.raises(ValueError, match=r"start_method must be one of \[None, 'spawn', .*'threads'\], "
                                         r"got 'bogus'"):
        fit_bpr(start_method="bogus")
    with pytest.raises(ValueError, match=r"mode must be one of \('sum', 'mean'\), got 'max'"):
        nn.EmbeddingBag(4, 2, mode="max")


def test_valid_arguments_of_other_spellings_are_still_taken():
    # numpy's ints and bools, 0 and 1 for a flag, None for a seed: as before
    model = fa.models.BPR(np.int64(3), np.int32(4), dim=np.int64(2), scale=np.float32(0.5), seed=None,
                          biases=np.bool_(True))
    assert model.U.shape == (3, 2) and model.biases
    assert fa.models.Word2Vec(sg=0).sg is False and fa.models.Word2Vec(sg=1).sg is True
    assert nn.Linear(2, 3, bias=0).bias is None
    assert nn.Softmax(dim=1).axis == 1 and nn.Softmax(-2).axis == -2
    assert nn.Conv2d(2, 4, kernel_size=[3, 1], stride=(2, 1)).kernel_size == (3, 1)
    assert nn.Dropout(0, seed=None).p == 0.0


def test_valid_sampler_arguments_of_other_spellings_are_still_taken():
    # flags as bools, numpy bools or 0/1; seeds as numpy ints, big ints or sequences of them
    for shuffle in (True, np.bool_(True), 1, 0, np.int64(1)):
        assert make_feed_sampler(shuffle=shuffle, seed=0).examples_per_epoch == 4
    for seed in (None, 0, np.int64(7), np.uint32(7), 2**100, [3, 0], (3, 0), np.array([3, 0]), range(3)):
        make_feed_sampler(shuffle=True, seed=seed)
        make_skip_gram_sampler(seed=seed)
    same = [next(make_pairwise_sampler(seed=seed).epoch()) for seed in ([3, 0], np.array([3, 0]))]
    assert [a.tolist() for a in same[0]] == [a.tolist() for a in same[1]]
    assert make_skip_gram_sampler(sample=np.float32(1e-3), ns_exponent=np.int64(1)).sample == \
        pytest.approx(1e-3)
    make_cbow_sampler(window=np.int64(2), sample=0, ns_exponent=-0.5, block_tokens=np.int32(3))


def test_activation_bounds_may_be_infinite_but_not_nan():
    # as torch.clamp and numpy.clip: an infinite bound leaves that side open
    x = fa.Input([-3.0, 0.5, 2.0])
    assert fa.hardtanh(x, -math.inf, 1.0).value.tolist() == [-3.0, 0.5, 1.0]
    assert nn.Hardtanh(0.0, math.inf)(x).value.tolist() == [0.0, 0.5, 2.0]
    assert fa.clip(x, -math.inf, np.float64(math.inf)).value.tolist() == [-3.0, 0.5, 2.0]
    assert fa.leaky_relu(x, np.float32(0.5)).value.tolist() == [-1.5, 0.5, 2.0]
    with pytest.raises(ValueError, match=r"hardtanh: min_val must be a number \(not NaN\), got nan"):
        fa.hardtanh(x, math.nan, 1.0)
    with pytest.raises(ValueError, match=r"leaky_relu: negative_slope must be a finite number, got inf"):
        fa.leaky_relu(x, math.inf)


@pytest.mark.parametrize("check,args,result", [
    (checks.check_int, ("f", "n", np.int64(3)), 3),
    (checks.check_int, ("f", "axis", -1, None), -1),
    (checks.check_sizes, ("f",), ()),
    (checks.check_seed, ("f", None), None),
    (checks.check_number, ("f", "x", 1), 1.0),
    (checks.check_flag, ("f", "x", np.bool_(False)), False),
    (checks.check_choice, ("f", "x", None, [None, "a"]), None),
    (checks.check_callable, ("f", "x", None), None),
])
def test_the_shared_checks_return_what_they_checked(check, args, result):
    assert check(*args) == result and type(check(*args)) is type(result)


@pytest.mark.parametrize("bounds,text", [
    (dict(above=0), "a finite number > 0"),
    (dict(at_least=0), "a finite number >= 0"),
    (dict(at_least=0, below=1), r"a number in \[0, 1\)"),
    (dict(above=0, at_most=1), r"a number in \(0, 1\]"),
    ({}, "a finite number"),
])
def test_check_number_says_which_bounds(bounds, text):
    with pytest.raises(ValueError, match=rf"f: x must be {text}, got inf"):
        checks.check_number("f", "x", math.inf, **bounds)

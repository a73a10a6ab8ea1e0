"""Data for training (`fa.data`): the samplers of `fastad.train`'s compiled loop, built-in
data, and user x item interaction matrices with their splits.

- `FeedSampler` and `BagSampler` (`fastad.training.feeds`) fill a graph's leaves with
  given rows; `PairwiseSampler` (`fastad.models.recsys`) draws BPR's triples from an
  `Interactions` matrix, `WarpSampler` WARP's (negatives drawn against the current scores,
  with their rank weights), `FeatureSampler` either's ids as bags of weighted features
  (`FeatureBags`, LightFM's feature matrices); `SkipGramSampler`, `CbowSampler`, `SharedNegativeSampler`
  (skip-gram with shared negatives) and the subword forms `SubwordSkipGramSampler`,
  `SubwordCbowSampler`, `SubwordSharedNegativeSampler` (`fastad.models.text`) walk a
  corpus's windows. Each fills a graph's leaves with one example at a time inside `fastad.train`,
  with no Python between examples; every one follows the protocol of `Sampler`.
- `planted_preferences`, `planted_interactions`, `train_test_split`, `leave_k_out`,
  `sample_triples` and `partition_triples` (the buckets of `fa.distributed.buckets`): the
  recommenders' data (`fastad.models.recsys.interactions`).
"""
from fastad.training.sampler import Sampler
from fastad.training.feeds import BagSampler, FeedSampler
from fastad.models.recsys._pairs import (FeatureBags, FeatureSampler, Interactions, PairwiseSampler,
                                        WarpSampler)
from fastad.models.recsys.interactions import (check_interactions, leave_k_out, pairwise_auc,
                                               partition_triples, planted_interactions,
                                               planted_preferences, sample_triples,
                                               train_test_split)
from fastad.models.text._windows import (AliasTable, CbowSampler, SharedNegativeSampler, SkipGramSampler,
                                         SubwordCbowSampler, SubwordSharedNegativeSampler, SubwordSkipGramSampler,
                                         TokenStream, WindowSampler, count_words)

__all__ = ["Sampler", "FeedSampler", "BagSampler", "PairwiseSampler", "WarpSampler", "FeatureBags", "FeatureSampler",
           "Interactions",
           "WindowSampler", "SkipGramSampler", "CbowSampler", "SharedNegativeSampler", "SubwordSkipGramSampler",
           "SubwordCbowSampler", "SubwordSharedNegativeSampler", "AliasTable",
           "TokenStream", "count_words",
           "planted_preferences", "pairwise_auc", "planted_interactions", "check_interactions",
           "train_test_split", "leave_k_out", "sample_triples", "partition_triples"]

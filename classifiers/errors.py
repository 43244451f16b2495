"""The error of input the classifier CLIs cannot use (an empty pool, a malformed errors report, an index
setting the embeddings cannot take): ``classifiers.train`` and ``classifiers.retrieve`` print it in one
line and exit 2, as for a bad config key. Anything else they raise is a bug and keeps its traceback."""


class InputError(ValueError):
    pass

"""Ray's package ``ray.tune.utils``: here its module :mod:`kubetune.utils.mock_trainable` (``MyTrainableClass``, the
toy trainable of Ray's examples)."""

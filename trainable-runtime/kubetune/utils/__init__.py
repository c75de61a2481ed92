"""Ray's package ``ray.tune.utils``: :func:`validate_save_restore` and :func:`wait_for_gpu` (from
:mod:`kubetune.utils.util`, Ray's ``ray.tune.utils.util``) and the module :mod:`kubetune.utils.mock_trainable`
(``MyTrainableClass``, the toy trainable of Ray's examples)."""

from kubetune.utils.util import validate_save_restore, wait_for_gpu

__all__ = ["validate_save_restore", "wait_for_gpu"]

"""kubetune.runtime.loader: import paths, inline source, cloudpickle blobs."""

from __future__ import annotations

import sys
import traceback

import cloudpickle
import pytest

import kubetune
from kubetune.env import TrialEnv
from kubetune.runtime.function_trainable import FunctionTrainable
from kubetune.runtime.loader import SOURCE_MODULE, exec_source, import_entrypoint, load_trainable_class
from kubetune.storage import open_storage

SOURCE = """
import kubetune

def helper():
    raise ValueError("from the inline source")

class MyTrainable(kubetune.Trainable):
    class Inner:
        pass

    def step(self):
        return {"x": 1}
"""


def _env(tmp_path, **fields) -> TrialEnv:
    return TrialEnv(
        namespace="ns",
        experiment="exp",
        trial="t",
        attempt=0,
        config={},
        trial_dir_uri=f"file://{tmp_path}/store/t",
        **fields,
    )


def test_import_entrypoint_resolves_dotted_names():
    assert import_entrypoint("kubetune.trainable:Trainable") is kubetune.Trainable
    assert import_entrypoint("kubetune.runtime.function_trainable:FunctionTrainable.setup") is FunctionTrainable.setup
    with pytest.raises(ValueError):
        import_entrypoint("kubetune.trainable.Trainable")
    with pytest.raises(AttributeError):
        import_entrypoint("kubetune.trainable:NoSuchThing")
    with pytest.raises(ImportError):
        import_entrypoint("no_such_module_kubetune:X")


def test_inline_source_is_a_fresh_module_whose_lines_show_in_tracebacks():
    cls = exec_source(SOURCE, "MyTrainable")
    assert cls.__module__ == SOURCE_MODULE and sys.modules[SOURCE_MODULE].MyTrainable is cls
    with pytest.raises(ValueError) as info:
        sys.modules[SOURCE_MODULE].helper()
    assert 'raise ValueError("from the inline source")' in "".join(traceback.format_exception(info.value))
    with pytest.raises(NameError):
        exec_source(SOURCE, "Missing")


def test_load_trainable_class_from_each_source(tmp_path):
    storage = open_storage(f"file://{tmp_path}")
    assert (
        load_trainable_class(_env(tmp_path, entrypoint="kubetune.trainable:Trainable"), storage) is kubetune.Trainable
    )
    assert load_trainable_class(_env(tmp_path, source=SOURCE, name="MyTrainable"), storage).__name__ == "MyTrainable"

    def fn(config):
        kubetune.report({"y": config["a"]})

    storage.put_bytes(f"file://{tmp_path}/fn.pkl", cloudpickle.dumps(fn))
    cls = load_trainable_class(_env(tmp_path, pickle_uri=f"file://{tmp_path}/fn.pkl"), storage)
    assert issubclass(cls, FunctionTrainable)
    trainable = cls(config={"a": 5})
    assert trainable.train()["y"] == 5
    trainable.stop()


def test_exactly_one_trainable_source(tmp_path):
    storage = open_storage(f"file://{tmp_path}")
    with pytest.raises(ValueError, match="exactly one"):
        load_trainable_class(_env(tmp_path), storage)
    with pytest.raises(ValueError, match="exactly one"):
        load_trainable_class(_env(tmp_path, entrypoint="a:b", source="x = 1", name="x"), storage)
    with pytest.raises(ValueError, match="name"):
        load_trainable_class(_env(tmp_path, source="x = 1"), storage)
    with pytest.raises(FileNotFoundError):
        load_trainable_class(_env(tmp_path, pickle_uri=f"file://{tmp_path}/absent.pkl"), storage)

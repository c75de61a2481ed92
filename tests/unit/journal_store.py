"""ConfigMaps in memory with the API server's create/patch/delete rules, for unit tests of the
journal and of controller restarts (imported as ``tests.unit.journal_store``; the integration
tests use the real API server through ``kubetune_operator.kube``)."""

from __future__ import annotations

import copy


class ConfigMaps:
    """One namespace's ConfigMaps by name; ``fail`` makes the next N writes raise, as a failing API server."""

    def __init__(self):
        self.items: dict[str, dict] = {}
        self.writes = 0
        self.fail = 0

    async def write(self, namespace, write) -> None:
        """Carry out a :class:`kubetune_operator.journal.Write` as ``Kube.write_journal`` does."""
        if self.fail:
            self.fail -= 1
            raise RuntimeError("injected API failure")
        self.writes += 1
        for manifest in write.creates:
            name = manifest["metadata"]["name"]
            if name in self.items:
                self.items[name]["data"].update(manifest["data"])  # 409: merge the data in
            else:
                self.items[name] = copy.deepcopy(manifest)
        for name, data in write.patches:
            if name not in self.items:
                raise RuntimeError(f"404: ConfigMap {name} not found")
            self.items[name]["data"].update(data)
        for name in write.deletes:
            self.items.pop(name, None)

    def list(self) -> list[dict]:
        """Every ConfigMap, as the API server lists them."""
        return copy.deepcopy(list(self.items.values()))

    def size(self) -> int:
        """Bytes of data held, over every ConfigMap."""
        return sum(len(k) + len(v) for cm in self.items.values() for k, v in cm["data"].items())

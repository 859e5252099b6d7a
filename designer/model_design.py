"""A design for a whole model: one design per layer or group of layers, kept together.

Long-context models rarely use one mask in every layer (dense early layers, sliding windows
later, a few global layers between). A ``ModelDesign`` holds ``n_layers`` and groups of
consecutive layers, each with its ``Design``; every layer is in exactly one group, and every
design covers the same tokens (the model sees one sequence length). ``assign`` gives a range of
layers a design, splitting the groups it cuts and merging neighbours that end up with the same
design, so editing never leaves gaps or overlaps.

>>> import torch
>>> from designer.layout import Layout
>>> dense = Design(Layout(torch.ones(1, 2, 2, dtype=torch.bool), 16), name="dense")
>>> tril = Design(Layout(torch.ones(1, 2, 2, dtype=torch.bool).tril(), 16), name="tril")
>>> model = ModelDesign.uniform("tiny", 4, dense).assign(1, 2, tril)
>>> [(g.first, g.last, g.design.name) for g in model.groups]
[(0, 0, 'dense'), (1, 2, 'tril'), (3, 3, 'dense')]
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from designer.design import Design, check_name
from designer.validate import check_int, shown

#: Most layers, and most distinct designs, a model design holds (a file reads them all).
MAX_LAYERS = 1024
MAX_MODEL_DESIGNS = 64


@dataclass(frozen=True)
class LayerGroup:
    """Layers ``first`` to ``last`` (both included, counted from 0) and their design."""

    first: int
    last: int
    design: Design

    def __post_init__(self) -> None:
        check_int("first layer", self.first, low=0, high=MAX_LAYERS - 1)
        check_int("last layer", self.last, low=self.first, high=MAX_LAYERS - 1)
        if not isinstance(self.design, Design):
            raise TypeError(f"design must be a Design, got {type(self.design).__name__}")

    @property
    def label(self) -> str:
        """``layer 3`` or ``layers 0–11``, as people count them (from 0, as transformers does)."""
        return f"layer {self.first}" if self.first == self.last else (
            f"layers {self.first}–{self.last}"
        )  # fmt: skip


@dataclass(frozen=True)
class ModelDesign:
    """``groups``, in layer order, cover layers ``0 .. n_layers - 1`` exactly once."""

    name: str
    n_layers: int
    groups: tuple[LayerGroup, ...]

    def __post_init__(self) -> None:
        check_name(self.name)
        check_int("n_layers", self.n_layers, low=1, high=MAX_LAYERS)
        if not isinstance(self.groups, tuple) or not self.groups:
            raise ValueError(f"groups must be a non-empty tuple, got {shown(self.groups)}")
        expected = 0
        for group in self.groups:
            if not isinstance(group, LayerGroup):
                raise TypeError(f"groups must hold LayerGroups, got {type(group).__name__}")
            if group.first != expected:
                what = "overlaps" if group.first < expected else "leaves out"
                raise ValueError(
                    f"{group.label} {what} layers: the groups must cover every layer once, "
                    f"in order, and the next one is layer {expected}"
                )
            expected = group.last + 1
        if expected != self.n_layers:
            raise ValueError(
                f"the groups cover layers 0–{expected - 1}, but the model has {self.n_layers} "
                "layers"
            )
        if len(self.designs) > MAX_MODEL_DESIGNS:
            raise ValueError(
                f"a model design holds at most {MAX_MODEL_DESIGNS} distinct designs, got "
                f"{len(self.designs)}"
            )
        lengths = {(g.design.layout.seq_len_q, g.design.layout.seq_len_k) for g in self.groups}
        if len(lengths) > 1:
            found = ", ".join(f"{q} × {k}" for q, k in sorted(lengths))
            raise ValueError(
                f"every layer's design must cover the same tokens (the model sees one sequence "
                f"length), got {found}"
            )

    @classmethod
    def uniform(cls, name: str, n_layers: int, design: Design) -> ModelDesign:
        """A model whose every layer has ``design``."""
        n_layers = check_int("n_layers", n_layers, low=1, high=MAX_LAYERS)
        return cls(name, n_layers, (LayerGroup(0, n_layers - 1, design),))

    @property
    def designs(self) -> tuple[Design, ...]:
        """The distinct designs, in order of first use (compared by value, without hashing
        whole layouts)."""
        found: list[Design] = []
        for group in self.groups:
            if not any(group.design is d or group.design == d for d in found):
                found.append(group.design)
        return tuple(found)

    def design_of(self, layer: int) -> Design:
        """The design of layer ``layer`` (counted from 0)."""
        layer = check_int("layer", layer, low=0, high=self.n_layers - 1)
        return next(g.design for g in self.groups if g.first <= layer <= g.last)

    def assign(self, first: int, last: int, design: Design) -> ModelDesign:
        """The model with layers ``first`` to ``last`` given ``design``."""
        first = check_int("first layer", first, low=0, high=self.n_layers - 1)
        last = check_int("last layer", last, low=first, high=self.n_layers - 1)
        pieces: list[LayerGroup] = []
        for group in self.groups:
            if group.first < first:
                pieces.append(replace(group, last=min(group.last, first - 1)))
            if group.last > last:
                pieces.append(replace(group, first=max(group.first, last + 1)))
        pieces.append(LayerGroup(first, last, design))
        return replace(self, groups=_merged(sorted(pieces, key=lambda g: g.first)))

    def with_layers(self, n_layers: int) -> ModelDesign:
        """The model with ``n_layers`` layers: the last group grows or groups past it go."""
        n_layers = check_int("n_layers", n_layers, low=1, high=MAX_LAYERS)
        kept = [g for g in self.groups if g.first < n_layers]
        kept[-1] = replace(kept[-1], last=n_layers - 1)
        return replace(self, n_layers=n_layers, groups=tuple(kept))


def _merged(groups: list[LayerGroup]) -> tuple[LayerGroup, ...]:
    """Neighbouring groups with the same design as one."""
    out: list[LayerGroup] = []
    for group in groups:
        if out and out[-1].design == group.design and out[-1].last + 1 == group.first:
            out[-1] = replace(out[-1], last=group.last)
        else:
            out.append(group)
    return tuple(out)

"""The Hopper build's configuration checks its invariants."""

from __future__ import annotations

import pytest

from gpu.forward.sm90 import HopperConfig


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"dtype": "f32"}, "dtype must be one of"),
        ({"head_dim": 96}, "head_dim must be one of"),
        ({"block_n": 32}, "block_n must be one of 64, 128"),
        ({"stages": 5}, "stages must be one of 2, 3, 4"),
        ({"head_dim": 128, "stages": 3}, "need 262400 bytes of shared memory"),
        ({"head_dim": 128, "stages": 3, "tokens": True}, "need 268544 bytes of shared memory"),
        ({"consumers": 3}, "consumers must be one of 1, 2"),
        ({"consumers": 1, "min_blocks": 2}, "pingpong needs two consumers"),
        ({"min_blocks": 2}, "min_blocks must be one of 1 with 2 consumer"),
        ({"consumers": 1, "pingpong": False}, "min_blocks must be one of 2, 3 with 1 consumer"),
        (
            {"consumers": 1, "pingpong": False, "min_blocks": 3},
            "three CTAs per SM hold 64-key tiles only",
        ),
        (
            {"head_dim": 128, "consumers": 1, "pingpong": False, "min_blocks": 2},
            "need 164096 bytes of shared memory per CTA, too many for 2 CTAs per SM",
        ),
        (
            {"consumers": 1, "pingpong": False, "min_blocks": 2, "stages": 3, "tokens": True},
            "token_stages=True need 118016 bytes of shared memory per CTA, too many for 2 CTAs",
        ),
    ],
)
def test_hopper_config_names_bad_values(kwargs, match):
    with pytest.raises(ValueError, match=match):
        HopperConfig(**{"dtype": "bf16", "head_dim": 64, **kwargs})


def test_hopper_config_takes_token_stages_as_a_bool():
    with pytest.raises(TypeError, match="token_stages must be True or False, got int 1"):
        HopperConfig("bf16", 64, token_stages=1)

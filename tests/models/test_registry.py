import json

import pytest
import torch
from torch import nn

from landscape.errors import LandscapeError
from landscape.models import (
    count_parameters,
    create_model,
    list_aliases,
    list_models,
    register_model,
    resolve_model_name,
)

EXPECTED_MODELS = {"alternet50", "alternet_mini", "resnet18", "resnet50", "resnet_mini", "vit_mini", "vit_ti"}


def test_list_models_sorted_and_complete():
    names = list_models()
    assert names == sorted(names)
    assert set(names) >= EXPECTED_MODELS
    assert not set(list_aliases()) & set(names)  # aliases are not listed


def test_list_models_pattern():
    assert list_models("resnet*") == sorted(n for n in list_models() if n.startswith("resnet"))
    minis = list_models("*_mini")
    assert set(minis) >= {"alternet_mini", "resnet_mini", "vit_mini"}
    assert all(n.endswith("_mini") for n in minis)
    assert list_models("nothing*") == []


@pytest.mark.parametrize(("alias", "target"), [("alternet", "alternet50"), ("resnet", "resnet50"), ("vit", "vit_ti")])
def test_aliases_resolve(alias, target):
    assert resolve_model_name(alias) == target
    assert list_aliases()[alias] == target


def test_create_model_with_alias_records_resolved_name():
    model = create_model("vit", num_classes=5, depth=1)
    assert model.model_name == "vit_ti"
    assert model.num_classes == 5
    assert model.model_kwargs == {"depth": 1}


def test_unknown_model_lists_close_matches():
    with pytest.raises(LandscapeError) as info:
        create_model("resnet19")
    msg = str(info.value)
    assert "\n" not in msg
    assert "resnet18" in msg
    assert "landscape models" in msg


def test_unknown_model_without_close_match_still_says_what_to_do():
    with pytest.raises(LandscapeError, match="landscape models"):
        create_model("zzzzzz")


def test_unknown_option_is_a_user_error():
    with pytest.raises(LandscapeError, match="does not take"):
        create_model("resnet_mini", bogus_option=3)


def test_bad_option_values_are_user_errors():
    with pytest.raises(LandscapeError):
        create_model("resnet_mini", stem="nope")
    with pytest.raises(LandscapeError):
        create_model("vit_mini", pos_embed="sinusoid")
    with pytest.raises(LandscapeError):
        create_model("resnet_mini", num_classes=0)


def test_non_json_kwargs_rejected():
    with pytest.raises(LandscapeError, match="checkpoint"):
        create_model("resnet_mini", widths=(16, 32, object(), 64))


def test_rebuild_from_recorded_metadata_roundtrips_through_json():
    torch.manual_seed(0)
    model = create_model("resnet_mini", num_classes=4, in_chans=1, layers=(1, 2, 1, 1), preact=True)
    assert model.model_kwargs == {"in_chans": 1, "layers": [1, 2, 1, 1], "preact": True}
    meta = json.loads(json.dumps({"model": model.model_name, "kwargs": model.model_kwargs, "n": model.num_classes}))
    rebuilt = create_model(meta["model"], num_classes=meta["n"], **meta["kwargs"])
    rebuilt.load_state_dict(model.state_dict())
    model.eval()
    rebuilt.eval()
    x = torch.randn(2, 1, 32, 32)
    torch.testing.assert_close(rebuilt(x), model(x))


def test_register_model_rejects_duplicates():
    with pytest.raises(ValueError):

        @register_model
        def resnet18(num_classes: int = 10, **kwargs) -> nn.Module:  # noqa: F811
            return nn.Linear(1, num_classes)


def test_count_parameters():
    layer = nn.Linear(3, 4)
    assert count_parameters(layer) == 16
    layer.bias.requires_grad_(False)
    assert count_parameters(layer, trainable_only=True) == 12


@pytest.mark.parametrize(
    ("name", "expected"), [("resnet18", 11_220_132), ("resnet50", 23_705_252), ("vit_ti", 5_403_172)]
)
def test_exact_parameter_counts_at_100_classes(name, expected):
    assert count_parameters(create_model(name, num_classes=100, in_chans=3)) == expected


@pytest.mark.parametrize("name", list_models("*_mini"))
def test_mini_models_are_cpu_sized(name):
    assert count_parameters(create_model(name, num_classes=100, in_chans=3)) <= 300_000

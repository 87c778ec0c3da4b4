"""One serialised form of a config across processes (docs/contracts.md, "Targets"): a case of every
built-in family, with every option, arrives whole in another interpreter."""

import json
import sys

import pytest

from gradcheck_rnn import Case, RNNConfig
from gradcheck_rnn.families import family, modes
from gradcheck_rnn.targets import resolve_target

# Every built-in family, and every option of the case id: -P, -nobias, -longmem, each family's own.
EVERY_FAMILY_AND_OPTION = [
    "rnn_relu-L2-bi-I3-H4-nobias-T5-B2-len5.3-f32-s1",
    "rnn_tanh-L1-uni-I2-H3-T4-B1-len4-f64-s2",
    "lstm-L2-bi-I3-H5-P3-longmem-T6-B2-len6.2-f32-s3",
    "lstm-L1-uni-I2-H3-nobias-T3-B1-len3-f64-s9",
    "gru-L1-bi-I3-H4-longmem-T5-B2-len5.1-f16-s4",
    "s6-L1-uni-I2-H3-N2-R1-nosoftplus-nogate-longmem-T4-B1-len4-f32-s5",
    "s6-L2-uni-I2-H3-N3-R2-T4-B1-len4-bf16-s6",
    "slstm-L1-uni-I4-H4-NH2-expf-mconst-T4-B2-len4.3-f64-s7",
    "slstm-L1-uni-I2-H4-NH2-longmem-T3-B1-len3-f32-s10",
    "slstm-L2-bi-I3-H4-nobias-T3-B1-len3-f32-s8",
    "mlstm-L2-uni-I3-H6-NH3-K2-strongdecay-T4-B2-len4.1-f32-s11",
    "gla-L1-uni-I3-H4-NH2-K3-R2-headdecay-nobias-T4-B1-len4-f64-s12",
    "gla-L1-uni-I2-H3-NH3-K2-R1-headdecay-strongdecay-T5-B3-len5.2.0-f64-s13",
    "gdn-L1-uni-I2-H2-K2-longmem-T5-B3-len5.2.0-f64-s14",
    "gdn-L2-uni-I3-H4-NH2-K3-T5-B1-len5-f32-s15",
    "rwkv7-L1-uni-I3-H4-NH2-K3-strongdecay-T5-B2-len5.2-f32-s16",
    "rwkv7-L2-uni-I2-H2-K2-longmem-T4-B1-len4-f64-s17",
    "rwkv7-L1-uni-I3-H3-K4-nobias-T3-B1-len3-f64-s18",
    "conv1d-L2-uni-I3-H4-W3-silu-T5-B2-len5.2-f32-s19",
    "conv1d-L1-uni-I2-H3-W2-nobias-T3-B1-len3-f64-s20",
    "deltaproduct-L1-uni-I3-H4-NH2-K2-n2-strongdecay-T4-B2-len4.1-f32-s21",
    "deltaproduct-L2-uni-I2-H2-K3-n3-nobias-T3-B1-len3-f64-s22",
    "kda-L1-uni-I3-H4-NH2-K2-R2-strongdecay-converged-T5-B2-len5.3-f32-s16",
]


def attributes(config: RNNConfig) -> dict:
    """What a target reads of a config: its fields, its options (defaults included), every property."""
    return json.loads(json.dumps(RNNConfig.from_wire(config.to_wire()).to_wire()["attributes"]))


def test_the_cases_cover_every_built_in_family():
    built_in = {mode for mode in modes() if family(mode).__module__.startswith("gradcheck_rnn.")}
    assert {case_id.split("-")[0] for case_id in EVERY_FAMILY_AND_OPTION} >= built_in


@pytest.mark.parametrize("case_id", EVERY_FAMILY_AND_OPTION)
def test_the_wire_form_round_trips_and_names_every_attribute(case_id):
    config = Case.from_id(case_id).config
    wire = config.to_wire()
    assert RNNConfig.from_wire(json.loads(json.dumps(wire))) == config
    for name in ("mode", "num_gates", "has_cell_state", "h_size", "c_size", "state_size", "long_memory",
                 "num_directions", "bias", "proj_size"):
        assert wire["attributes"][name] == getattr(config, name), name
    assert wire["attributes"]["options"] == config.family.option_values(config)


def test_a_wire_form_that_contradicts_itself_is_one_sentence():
    wire = Case.from_id(EVERY_FAMILY_AND_OPTION[2]).config.to_wire()
    wire["attributes"]["hidden_size"] = 6
    with pytest.raises(Exception, match="does not match its id"):
        RNNConfig.from_wire(wire)


def test_every_family_s_config_arrives_whole_in_another_interpreter(foreign_path):
    target = resolve_target(f"foreign_targets:EchoesItsConfig@{sys.executable}")
    try:
        for case_id in EVERY_FAMILY_AND_OPTION:
            case = Case.from_id(case_id)
            seen = json.loads(target.supports_case(case))
            expected = attributes(case.config)
            assert {name: seen[name] for name in expected} == expected, case_id
            assert seen["option()"] == expected["options"], case_id
    finally:
        target.impl.close()

"""The request schemas state the rules the server enforces, so a request that the OpenAPI document
calls valid is not refused for a rule it hides (schemathesis' ``positive_data_acceptance``).

The repair policy's bounds are written twice, as pydantic constraints (for the document) and in
``medic.repair.policy_changes.check_policy`` (the rule): here each bound of the schema is held
against ``check_policy``, which must accept the bound and refuse just past it, as the model does.
"""

from __future__ import annotations

import math
import re
from typing import Any

import pytest
from pydantic import ValidationError

from medic.api.schemas_auth import ModesIn, TokenIn
from medic.api.schemas_controller import CONTROLLER_AUDIT_KINDS, ActionFinishIn, AuditIn
from medic.api.schemas_repairs import AUTO_ACTIONS, RepairPolicyIn
from medic.domain.actions import ActionStatus
from medic.domain.auth import TOKEN_NAME_PATTERN, Role, check_token_name
from medic.domain.repairs import RepairAction
from medic.errors import InputError
from medic.repair.policy_changes import check_policy
from medic.repair.rules.xid_classes import XID_CLASSES

POLICY = RepairPolicyIn.model_json_schema()["properties"]
BOUNDED = sorted(
    name
    for name, field in POLICY.items()
    if {"minimum", "exclusiveMinimum", "maximum"} & set(field)
)


def _runs(**fields: Any) -> bool:
    """Whether ``check_policy`` accepts the policy (after the model took the fields)."""
    try:
        check_policy(RepairPolicyIn.model_construct(**fields).to_policy())
    except InputError:
        return False
    return True


def _outside(value: float, step: int, integer: bool) -> float:
    return value + step if integer else math.nextafter(value, step * math.inf)


def test_every_number_of_the_policy_is_bounded() -> None:
    numbers = [n for n, f in POLICY.items() if f.get("type") in ("number", "integer")]
    assert sorted(numbers) == BOUNDED and len(BOUNDED) == 7


@pytest.mark.parametrize("name", BOUNDED)
def test_the_schema_bounds_are_check_policys(name: str) -> None:
    field = POLICY[name]
    integer = field["type"] == "integer"
    high = field["maximum"]
    assert _runs(**{name: high})
    assert not _runs(**{name: _outside(high, +1, integer)})
    with pytest.raises(ValidationError):
        RepairPolicyIn(**{name: _outside(high, +1, integer)})
    if "minimum" in field:
        low = field["minimum"]
        assert _runs(**{name: low})
        below = _outside(low, -1, integer)
    else:
        below = field["exclusiveMinimum"]
        assert _runs(**{name: math.nextafter(below, math.inf)})
    assert not _runs(**{name: below})
    with pytest.raises(ValidationError):
        RepairPolicyIn(**{name: below})


def test_persistence_overrides_state_their_keys_and_bounds() -> None:
    field = POLICY["persistence_overrides"]
    assert "patternProperties" not in field
    pattern = field["propertyNames"]["pattern"]
    values = field["additionalProperties"]
    week = values["maximum"]

    assert _runs(persistence_overrides={"xid:*": week, "agent:ecc_dbe": 0.0})
    assert not _runs(persistence_overrides={"xid:*": _outside(week, +1, False)})
    assert not _runs(persistence_overrides={"Xid 79": 1.0})
    assert not re.fullmatch(pattern, "Xid 79") and re.fullmatch(pattern, "xid:*")
    with pytest.raises(ValidationError):
        RepairPolicyIn(persistence_overrides={"Xid 79": 1.0})
    with pytest.raises(ValidationError):
        RepairPolicyIn(persistence_overrides={"xid:*": -1.0})


def test_auto_actions_and_xids_list_what_check_policy_takes() -> None:
    actions = POLICY["auto_actions"]["items"]["enum"]
    xids = POLICY["auto_xids"]["items"]["enum"]

    assert (
        set(actions)
        == {a.value for a in AUTO_ACTIONS}
        == {a.value for a in RepairAction} - {"remove"}
    )
    assert _runs(auto_actions=[RepairAction(a) for a in actions])
    assert not _runs(auto_actions=[RepairAction.REMOVE])
    assert xids == sorted(XID_CLASSES)
    assert _runs(auto_xids=xids)
    assert not _runs(auto_xids=[max(xids) + 1])


def test_trusted_detectors_state_the_token_name_pattern() -> None:
    items = POLICY["trusted_detectors"]["items"]

    assert items["pattern"] == TOKEN_NAME_PATTERN
    assert _runs(trusted_detectors=["nvsentinel", "agent", "ci-bot:p1"])
    assert not _runs(trusted_detectors=["a:b:c"])
    with pytest.raises(ValidationError):
        RepairPolicyIn(trusted_detectors=["a:b:c"])


@pytest.mark.parametrize(
    ("name", "valid"),
    [
        ("a" * 64, True),
        ("a" * 65, False),
        ("agent:" + "n" * 57, True),
        ("ci-bot:" + "p" * 63, True),
        ("ci-bot:" + "p" * 64, False),
        ("a:b:c", False),
        ("-lead", False),
        ("alice smith", False),
        ("a/b", False),
    ],
)
def test_token_names_follow_the_documented_pattern(name: str, valid: bool) -> None:
    field = TokenIn.model_json_schema()["properties"]["name"]
    assert field["pattern"] == TOKEN_NAME_PATTERN
    assert bool(re.fullmatch(field["pattern"], name)) is valid
    try:
        check_token_name(name, Role.DETECTOR)
    except InputError:
        accepted = False
    else:
        accepted = True
    assert accepted is valid


def test_partition_names_constrain_every_key() -> None:
    field = ModesIn.model_json_schema()["properties"]["partitions"]

    assert "patternProperties" not in field
    assert field["propertyNames"]["pattern"] == "^[A-Za-z0-9][\\w.:@+-]*$"
    assert field["additionalProperties"] == {"$ref": "#/$defs/Mode"}
    with pytest.raises(ValidationError):
        ModesIn.model_validate({"partitions": {"no spaces": "act"}})
    assert ModesIn.model_validate({"partitions": {"p0": "act"}}).partitions == {"p0": "act"}


def test_a_controller_audit_kind_and_a_finished_status_list_what_is_taken() -> None:
    kinds = AuditIn.model_json_schema()["properties"]["kind"]["enum"]
    statuses = ActionFinishIn.model_json_schema()["properties"]["status"]["enum"]

    assert kinds == sorted(k.value for k in CONTROLLER_AUDIT_KINDS)
    assert statuses == sorted(s.value for s in ActionStatus if s is not ActionStatus.STARTED)
    with pytest.raises(ValidationError):
        ActionFinishIn(status=ActionStatus.STARTED)

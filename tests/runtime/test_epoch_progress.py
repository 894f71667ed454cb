"""The rule that ends a FLIP-176 iteration, decided round by round (``EpochProgress.decide``)."""

from __future__ import annotations

from slipstream.datastream.scope import StreamScope
from slipstream.runtime.termination import EpochProgress, HeadRole, RoundDecision


def counts(variable: int = 0, criteria: int = 0, data: int = 0) -> dict[HeadRole, int]:
    return {HeadRole.VARIABLE: variable, HeadRole.CRITERIA: criteria, HeadRole.DATA: data}


def progress() -> EpochProgress:
    return EpochProgress(StreamScope((1,)), has_criteria=False)


def test_a_round_without_feedback_after_every_input_ended_terminates() -> None:
    assert progress().decide(3, counts(), inputs_ended=True, pending=0) is RoundDecision.TERMINATE


def test_records_let_in_after_the_rounds_baton_run_in_the_next_round_even_once_the_inputs_ended() -> None:
    """An unbounded data head let in its last records, and saw its input end, after it sent baton
    N: they belong to round N + 1, whose model update would be lost if round N ended the iteration."""
    rounds = progress()
    assert rounds.decide(3, counts(data=5), inputs_ended=True, pending=80) is RoundDecision.NEXT
    assert not rounds.terminated
    assert rounds.decide(4, counts(variable=1, data=80), inputs_ended=True, pending=0) is RoundDecision.NEXT
    assert rounds.decide(5, counts(), inputs_ended=True, pending=0) is RoundDecision.TERMINATE


def test_an_idle_round_while_an_input_is_open_parks() -> None:
    rounds = progress()
    assert rounds.decide(2, counts(), inputs_ended=False, pending=0) is RoundDecision.PARK
    assert rounds.parked

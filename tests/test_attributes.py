"""FLIP-327's attribute classes: the seed's names, Flink's shipped aliases, plain data."""

import pickle

from slipstream.attributes import (
    OperatorAttributes,
    OperatorAttributesBuilder,
    RecordAttributes,
    RecordAttributesBuilder,
)


def test_operator_attributes_default_to_false_and_build_with_either_name() -> None:
    default = OperatorAttributesBuilder().build()
    assert not (default.is_output_on_eof() or default.is_output_on_checkpoint() or default.has_internal_sorter())
    built = OperatorAttributesBuilder().set_is_output_on_eof(True).set_has_internal_sorter(True).build()
    assert built.is_output_on_eof() and built.is_output_only_after_end_of_stream()
    assert built.has_internal_sorter() and built.is_internal_sorter_supported()
    assert not built.is_output_on_checkpoint()
    alias = OperatorAttributesBuilder().set_output_only_after_end_of_stream(True) \
        .set_internal_sorter_supported(True).build()
    assert alias == built and isinstance(alias, OperatorAttributes)


def test_record_attributes_by_keyword_position_and_builder() -> None:
    assert RecordAttributes(is_backlog=True).is_backlog() and not RecordAttributes().is_backlog()
    assert RecordAttributes(True) == RecordAttributes(is_backlog=True) != RecordAttributes(False)
    assert pickle.loads(pickle.dumps(RecordAttributes(True))) == RecordAttributes(True)
    inputs = [RecordAttributes(False), RecordAttributes(True)]
    assert RecordAttributesBuilder(inputs).build().is_backlog()
    assert not RecordAttributesBuilder(inputs).set_backlog(False).build().is_backlog()
    assert not RecordAttributesBuilder([]).build().is_backlog()

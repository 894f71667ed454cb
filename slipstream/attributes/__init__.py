"""Plain data the planner and the channels read: operator and record attributes (FLIP-327).

This package imports nothing from the rest of slipstream.
"""

from slipstream.attributes.boundedness import Boundedness
from slipstream.attributes.operator_attributes import OperatorAttributes, OperatorAttributesBuilder
from slipstream.attributes.record_attributes import RecordAttributes, RecordAttributesBuilder

__all__ = [
    "Boundedness",
    "OperatorAttributes",
    "OperatorAttributesBuilder",
    "RecordAttributes",
    "RecordAttributesBuilder",
]

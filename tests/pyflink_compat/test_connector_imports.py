"""PyFlink's import paths for connectors: the package names its modules' connectors, as
``pyflink.datastream.connectors`` does, and ``hybrid_source`` is the HybridSource's module."""

from __future__ import annotations

import importlib

import pytest

import slipstream.datastream.connectors as connectors

PYFLINK_PACKAGE_NAMES = ["Sink", "Source", "NumberSequenceSource", "FileSink", "FileSource", "FileSourceBuilder",
                         "OutputFileConfig", "RollingPolicy", "StreamFormat"]


@pytest.mark.parametrize("name", PYFLINK_PACKAGE_NAMES + ["HybridSource", "IteratorSource", "ArrowSource"])
def test_the_package_names_each_connector_as_its_module_does(name: str) -> None:
    module = importlib.import_module(f"slipstream.datastream.connectors.{connectors._MODULE_OF[name]}")
    assert getattr(connectors, name) is getattr(module, name)
    assert name in dir(connectors)


def test_from_the_package_and_from_pyflinks_module_paths() -> None:
    from slipstream.datastream.connectors import FileSource, HybridSource, NumberSequenceSource
    from slipstream.datastream.connectors.file_system import FileSource as ModuleFileSource
    from slipstream.datastream.connectors.hybrid_source import HybridSource as ModuleHybridSource
    from slipstream.datastream.connectors.number_seq import NumberSequenceSource as ModuleNumbers
    assert (FileSource, HybridSource, NumberSequenceSource) == (ModuleFileSource, ModuleHybridSource, ModuleNumbers)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'KafkaSource'"):
        connectors.KafkaSource  # noqa: B018 - the access is the test
    with pytest.raises(ImportError):
        exec("from slipstream.datastream.connectors import KafkaSource")  # noqa: S102 - a literal import


def test_all_lists_every_name() -> None:
    assert sorted(connectors.__all__) == sorted(connectors._MODULE_OF)

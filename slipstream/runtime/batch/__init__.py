"""Batch engines: the implementations of :class:`slipstream.operators.batch_engine.BatchEngine`."""

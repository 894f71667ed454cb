"""What PyFlink keeps in ``pyflink.common``, under the same names, so a job ports by changing
``pyflink`` to ``slipstream`` in its imports.

The classes live in :mod:`slipstream.datastream`; this package only re-exports them.
"""

from slipstream.common.completable_future import CompletableFuture
from slipstream.common.configuration import Configuration
from slipstream.common.execution_config import ExecutionConfig
from slipstream.common.job_client import JobClient
from slipstream.common.job_execution_result import JobExecutionResult
from slipstream.common.job_id import JobID
from slipstream.common.job_status import JobStatus
from slipstream.common.restart_strategy import RestartStrategies, RestartStrategyConfiguration
from slipstream.common.serialization import DeserializationSchema, Encoder, SerializationSchema, SimpleStringSchema
from slipstream.common.serializer import TypeSerializer
from slipstream.common.time import Duration, Time
from slipstream.common.typeinfo import Row, RowKind, TypeInformation, Types
from slipstream.common.watermark_strategy import TimestampAssigner, WatermarkStrategy

__all__ = ["CompletableFuture", "Configuration", "DeserializationSchema", "Duration", "Encoder", "ExecutionConfig",
           "JobClient", "JobExecutionResult", "JobID", "JobStatus",
           "RestartStrategies", "RestartStrategyConfiguration", "Row", "RowKind", "SerializationSchema",
           "SimpleStringSchema", "Time", "TimestampAssigner", "TypeInformation", "TypeSerializer", "Types",
           "WatermarkStrategy"]

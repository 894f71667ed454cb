"""Remote stores for the file system tests: fsspec's memory file system, and S3 as served by a
moto server on 127.0.0.1 (offline, one per test session), reached through s3fs."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import boto3
import fsspec
import pytest

BUCKET = "slipstream-tests"


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{server._server.server_port}"
    fsspec.config.conf["s3"] = {"key": "testing", "secret": "testing", "use_listings_cache": False,
                                "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"}}
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing",
                 aws_secret_access_key="testing").create_bucket(Bucket=BUCKET)
    yield endpoint
    fsspec.config.conf.pop("s3", None)
    server.stop()


@pytest.fixture(params=["memory", "s3"])
def store(request: pytest.FixtureRequest) -> str:
    """A fresh directory URL on each remote store."""
    if request.param == "s3":
        request.getfixturevalue("s3_endpoint")
        return f"s3://{BUCKET}/{uuid.uuid4().hex}"
    return f"memory://slipstream/{uuid.uuid4().hex}"

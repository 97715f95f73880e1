"""An S3 bucket as a connected source (issue 46), against moto's S3 server started in the test: only objects whose
ETag changed are read, deletions followed, citations the object's URL, and a key with `../` skipped and named.
The Signature V4 headers ragvps computes are botocore's, byte for byte."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from ragvps.ingest.remote.sigv4 import Credentials, credentials, signed_headers

A = "# Ferries\n\nThe night ferry to Brindle Island leaves at eleven from pier four.\n"
B = "# Lighthouse\n\nThe lighthouse keeper logs forty ships each week in the harbour book.\n"


@pytest.fixture
def s3():
    moto_server = pytest.importorskip("moto.server")
    boto3 = pytest.importorskip("boto3")
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    client.create_bucket(Bucket="handbook")
    try:
        yield endpoint, client
    finally:
        server.stop()


def test_a_bucket_synced_incrementally(cli, tmp_path, s3):
    endpoint, client = s3
    client.put_object(Bucket="handbook", Key="docs/ferries.md", Body=A.encode())
    client.put_object(Bucket="handbook", Key="docs/lighthouse.md", Body=B.encode())
    client.put_object(Bucket="handbook", Key="docs/../../../escape.md", Body=b"# Escape\n\nThe vault code is 8841.\n")
    client.put_object(Bucket="handbook", Key="docs/logo.bin", Body=b"\x00\x01")
    client.put_object(Bucket="handbook", Key="other/skip.md", Body=b"# Elsewhere\n\nNot under the prefix.\n")
    cli.env.update(
        {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": endpoint,
            "RAGVPS_SOURCE_ALLOW_HOSTS": "127.0.0.1",
            "RAGVPS_SOURCE_AMBIENT_CREDENTIALS": "default/bucket",  # the server's own AWS_* sign this source's
        }
    )
    cli("source", "add", "s3", "bucket", "handbook", "--prefix", "docs/")
    [first] = json.loads(cli("sync", "--json").stdout)
    assert first["read"] == 2 and first["items"] == 2, first
    assert first["skipped"] == {"unsafe key": 1, "unsupported type": 1}
    assert "object key 'docs/../../../escape.md' is not a safe relative path" in first["problems"][0]
    assert not list(tmp_path.rglob("escape.md"))
    hits = json.loads(cli("query", "night ferry Brindle Island", "--json").stdout)
    assert hits[0]["path"] == f"{endpoint}/handbook/docs/ferries.md", hits[0]

    [again] = json.loads(cli("sync", "--json").stdout)
    assert again["read"] == 0 and again["unchanged"] == 2 and not again["ingested"], again

    client.put_object(Bucket="handbook", Key="docs/lighthouse.md", Body=B.replace("forty", "fifty").encode())
    client.delete_object(Bucket="handbook", Key="docs/ferries.md")
    [changed] = json.loads(cli("sync", "--json").stdout)
    assert (changed["read"], changed["unchanged"], changed["deleted"]) == (1, 0, 1), changed
    assert not json.loads(cli("query", "Brindle", "--json", "--mode", "keyword").stdout)


def test_a_missing_bucket_fails_by_name(cli, s3):
    endpoint, _ = s3
    cli.env.update(
        {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "RAGVPS_SOURCE_ALLOW_HOSTS": "127.0.0.1"}
    )
    cli("source", "add", "s3", "nobucket", "no-such-bucket", "--endpoint", endpoint)
    out = cli("sync", expect=1).stdout
    assert "listing bucket no-such-bucket" in out and "404" in out and "NoSuchBucket" in out


def test_signature_is_botocores():
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials as BotoCredentials

    url = "http://127.0.0.1:9000/handbook?continuation-token=a%2Fb&list-type=2&prefix=docs%2F"
    for token in ("", "session-token"):
        request = AWSRequest(method="GET", url=url)
        S3SigV4Auth(BotoCredentials("AKID", "secret", token or None), "s3", "eu-west-1").add_auth(request)
        when = datetime.strptime(request.headers["X-Amz-Date"], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
        ours = signed_headers(url, "eu-west-1", Credentials("AKID", "secret", token), when)
        assert ours["Authorization"] == request.headers["Authorization"]
        assert ours.get("x-amz-security-token") == request.headers.get("X-Amz-Security-Token")


def test_credentials_from_the_environment_and_the_shared_file(tmp_path):
    assert credentials({"AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b"}) == Credentials("a", "b")
    shared = tmp_path / "credentials"
    shared.write_text(
        "[default]\naws_access_key_id = x\naws_secret_access_key = y\n"
        "[work]\naws_access_key_id = w\naws_secret_access_key = z\naws_session_token = t\n"
    )
    assert credentials({"AWS_SHARED_CREDENTIALS_FILE": str(shared)}) == Credentials("x", "y")
    work = {"AWS_SHARED_CREDENTIALS_FILE": str(shared), "AWS_PROFILE": "work"}
    assert credentials(work) == Credentials("w", "z", "t")
    assert credentials({"AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none")}) is None
    assert "secret" not in repr(Credentials("a", "secret", "tok"))

"""The Hub -> S3 import the Job runs (pdkit/pods/weights_import.py), offline: moto's S3 and Secrets
Manager, and a fake Hub serving bytes from memory. Staging then reads what the import wrote."""

from __future__ import annotations

import hashlib
import json
import logging
import subprocess
import sys
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import quote, unquote, urlsplit

import boto3
import pytest
from botocore import xform_name
from botocore.exceptions import ClientError

from pdkit.pods import staging, weights_import
from pdkit.pods.weights_import import (
    EXIT_NOT_RETRYABLE,
    FILE_ATTEMPTS,
    MIB,
    PARTS_IN_FLIGHT,
    HubFile,
    HubSnapshot,
    ImportFailed,
    NotRetryable,
    Progress,
    git_blob_id,
    import_from_hub,
)
from pdkit.pods.weights_manifest import MANIFEST_NAME, Manifest, load_manifest, verify_bucket
from tests.fixtures.weights import BUCKET, PREFIX, REGION, weights_bucket

MODEL = "zai-org/GLM-5.1-FP8"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
PART = 5 * MIB  # S3's (and moto's) smallest part
LFS_OVER = 64 * 1024  # files this large are LFS/Xet on the fake Hub, with a sha256 in the listing
FILES = {
    "config.json": b'{"architectures": ["GlmMoeDsaForCausalLM"]}',
    "tokenizer/tokenizer.json": b'{"model": {}}' * 100,
    "model-00001-of-00003.safetensors": bytes(range(256)) * (11 * 4096),  # 11 MiB: three parts
    "model-00002-of-00003.safetensors": b"\x07" * (PART + 17),  # one byte-odd tail part
    "model-00003-of-00003.safetensors": b"\x01" * (200 * 1024),  # LFS but one part: a single PUT
    ".gitattributes": b"*.safetensors filter=lfs",
}
IMPORTED = {k: v for k, v in FILES.items() if k != ".gitattributes"}


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Stream:
    def __init__(self, data: bytes, *, fail_at: int | None = None) -> None:
        self.data, self.pos, self.fail_at, self.closed = data, 0, fail_at, False

    def read(self, size: int = -1, /) -> bytes:
        if self.fail_at is not None and self.pos >= self.fail_at:
            raise ConnectionError("connection reset by peer")
        size = len(self.data) - self.pos if size < 0 else min(size, 1024 * 1024)  # short reads, as over HTTP
        out = self.data[self.pos : self.pos + size]
        self.pos += len(out)
        return out

    def close(self) -> None:
        self.closed = True


class FakeHub:
    def __init__(self, files=None, *, gated=False, commit=COMMIT):
        self.files = dict(FILES if files is None else files)
        self.gated, self.commit = gated, commit
        self.served: dict[str, bytes] = {}  # what the Hub sends instead of the listed content
        self.fail_once: dict[str, int] = {}  # path -> byte offset of a dropped connection, first open only
        self.opens: Counter[str] = Counter()
        self.streams: list[Stream] = []

    def snapshot(self, model, revision):
        listing = []
        for path, data in self.files.items():
            lfs = len(data) > LFS_OVER
            listing.append(HubFile(path, len(data), sha(data) if lfs else None, None if lfs else git_blob_id(data)))
        return HubSnapshot(model=model, commit=self.commit, gated=self.gated, files=tuple(listing))

    def open(self, model, commit, path):
        assert (model, commit) == (MODEL, self.commit), "every file is read at the resolved commit"
        self.opens[path] += 1
        fail_at = self.fail_once.pop(path, None)
        stream = Stream(self.served.get(path, self.files[path]), fail_at=fail_at)
        self.streams.append(stream)
        return stream


class Recording:
    """A boto3 S3 client that records the S3 operations it sends (boto3's managed transfer included,
    through botocore's event hooks), and how many parts of one upload were in flight at once."""

    def __init__(self, client):
        self.client = client
        self.calls: list[tuple[str, str]] = []
        self.args: dict[str, list[dict]] = {}
        self._lock = threading.Lock()
        self._in_flight: Counter[str] = Counter()
        self.max_in_flight = 0
        client.meta.events.register("provide-client-params.s3.*", self._started)
        client.meta.events.register("after-call.s3.UploadPart", self._part_done)

    def _started(self, params, model, context, **kw):
        name = xform_name(model.name)
        with self._lock:
            if "Key" in params and not name.startswith(("head_", "get_", "list_")):
                self.calls.append((name, params["Key"]))
                self.args.setdefault(name, []).append(dict(params))
            if name == "upload_part":
                context["upload_id"] = params["UploadId"]
                self._in_flight[params["UploadId"]] += 1
                self.max_in_flight = max(self.max_in_flight, self._in_flight[params["UploadId"]])

    def _part_done(self, context, **kw):
        with self._lock:
            self._in_flight[context["upload_id"]] -= 1

    def __getattr__(self, name):
        return getattr(self.client, name)


@pytest.fixture(autouse=True)
def _root_logging():
    """main() configures the root logger for the pod's stdout; later tests must not log into a closed capture."""
    handlers, level = logging.root.handlers[:], logging.root.level
    yield
    logging.root.handlers[:], logging.root.level = handlers, level


@pytest.fixture
def aws(monkeypatch):
    with weights_bucket(monkeypatch) as client:
        yield Recording(client), boto3.client("secretsmanager", region_name=REGION)


@pytest.fixture
def s3(aws):
    return aws[0]


def run(hub, s3, **kw):
    kw.setdefault("have_token", False)
    return import_from_hub(hub, s3=s3, bucket=BUCKET, prefix=PREFIX, model=MODEL, revision="main", workers=3, part_bytes=PART, **kw)


def keys(s3):
    return {o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET).get("Contents", [])}


# --- the import -----------------------------------------------------------------------------------


def test_every_file_is_streamed_with_its_sha256_and_the_manifest_goes_last(s3):
    hub = FakeHub()
    manifest = run(hub, s3)
    assert manifest.model == MODEL
    assert manifest.revision == COMMIT, "the manifest names the commit, not the moving branch"
    assert {f.path: (f.size, f.sha256) for f in manifest.files} == {p: (len(d), sha(d)) for p, d in IMPORTED.items()}
    for path, data in IMPORTED.items():
        head = s3.head_object(Bucket=BUCKET, Key=PREFIX + path)
        assert (head["ContentLength"], head["Metadata"]["sha256"]) == (len(data), sha(data))
        assert s3.get_object(Bucket=BUCKET, Key=PREFIX + path)["Body"].read() == data
    assert PREFIX + ".gitattributes" not in keys(s3)
    assert s3.calls[-1] == ("put_object", PREFIX + MANIFEST_NAME)
    assert load_manifest(s3, BUCKET, PREFIX) == Manifest.from_json(manifest.to_json())
    assert verify_bucket(manifest, s3=s3, bucket=BUCKET, prefix=PREFIX) == []
    assert all(stream.closed for stream in hub.streams)


def test_large_files_go_up_as_multipart_uploads_with_bounded_parts_in_flight(s3):
    run(FakeHub(), s3)
    multipart = sorted(key for name, key in s3.calls if name == "complete_multipart_upload")
    assert multipart == [PREFIX + "model-00001-of-00003.safetensors", PREFIX + "model-00002-of-00003.safetensors"]
    etag = s3.head_object(Bucket=BUCKET, Key=PREFIX + "model-00001-of-00003.safetensors")["ETag"]
    assert etag.strip('"').endswith("-3"), "11 MiB in 5 MiB parts: three parts (a multipart ETag ends with -<parts>)"
    assert 1 <= s3.max_in_flight <= PARTS_IN_FLIGHT
    # Part checksums declared at creation and listed at completion (real S3 refuses them otherwise).
    assert {kw["ChecksumAlgorithm"] for kw in s3.args["create_multipart_upload"]} == {"CRC32"}
    assert all("ChecksumCRC32" in part for kw in s3.args["complete_multipart_upload"] for part in kw["MultipartUpload"]["Parts"])


def test_what_the_import_wrote_stages_onto_a_node(s3, tmp_path):
    run(FakeHub(), s3)
    dest = tmp_path / "glm"
    result = staging.stage(s3=s3.client, bucket=BUCKET, prefix=PREFIX, dest=dest, workers=2, progress_interval=0)
    assert result.fetched == len(IMPORTED)
    assert {p: (dest / p).read_bytes() for p in IMPORTED} == IMPORTED


def test_a_second_run_streams_only_the_small_git_files_again(s3):
    run(FakeHub(), s3)
    hub = FakeHub()
    run(hub, s3)
    assert set(hub.opens) == {"config.json", "tokenizer/tokenizer.json"}, "LFS files with a matching sha256 in the bucket are skipped"


def test_a_corrupted_stream_never_becomes_an_object(s3, caplog):
    hub = FakeHub()
    good = FILES["model-00001-of-00003.safetensors"]
    hub.served["model-00001-of-00003.safetensors"] = b"\xff" + good[1:]
    with caplog.at_level(logging.WARNING, logger="pdkit.weights"), pytest.raises(ImportFailed, match="1 of 5 files failed"):
        run(hub, s3)
    assert hub.opens["model-00001-of-00003.safetensors"] == FILE_ATTEMPTS
    assert PREFIX + "model-00001-of-00003.safetensors" not in keys(s3)
    assert PREFIX + MANIFEST_NAME not in keys(s3), "no manifest: staging refuses a partial import"
    assert PREFIX + "model-00002-of-00003.safetensors" in keys(s3), "the other files are kept for the next attempt"
    assert s3.client.list_multipart_uploads(Bucket=BUCKET).get("Uploads", []) == [], "failed uploads are aborted"
    assert "differs from the Hub's" in caplog.text


@pytest.mark.parametrize(
    ("served", "message"),
    [
        (FILES["model-00002-of-00003.safetensors"][:-1], "the Hub sent 5242896 bytes, its listing says 5242897"),
        (FILES["model-00002-of-00003.safetensors"] + b"x", "more than the 5242897 bytes"),
    ],
)
def test_a_stream_of_the_wrong_length_is_refused(s3, caplog, served, message):
    hub = FakeHub()
    hub.served["model-00002-of-00003.safetensors"] = served
    with caplog.at_level(logging.ERROR, logger="pdkit.weights"), pytest.raises(ImportFailed):
        run(hub, s3)
    assert message in caplog.text
    assert PREFIX + "model-00002-of-00003.safetensors" not in keys(s3)


def test_a_small_file_is_checked_against_its_git_blob_id(s3, caplog):
    hub = FakeHub()
    hub.served["config.json"] = FILES["config.json"].replace(b"Glm", b"Gml")
    with caplog.at_level(logging.ERROR, logger="pdkit.weights"), pytest.raises(ImportFailed):
        run(hub, s3)
    assert "config.json: git blob id" in caplog.text
    assert PREFIX + "config.json" not in keys(s3)


def test_a_dropped_connection_is_retried_and_counted_once(s3, monkeypatch):
    seen: list[Progress] = []
    real = Progress.__init__

    def spy(self, *a, **kw):
        real(self, *a, **kw)
        seen.append(self)

    monkeypatch.setattr(Progress, "__init__", spy)
    hub = FakeHub()
    hub.fail_once["model-00001-of-00003.safetensors"] = 7 * MIB
    run(hub, s3)
    assert hub.opens["model-00001-of-00003.safetensors"] == 2
    assert seen[0].done == sum(len(d) for d in IMPORTED.values()), "bytes of the failed attempt are not counted twice"


def test_a_manifest_of_another_commit_is_removed_before_files_change(s3):
    old = Manifest(model=MODEL, revision="f" * 40, files=(weights_import.FileEntry("config.json", 1, "0" * 64),))
    s3.put_object(Bucket=BUCKET, Key=PREFIX + MANIFEST_NAME, Body=old.to_json().encode())
    hub = FakeHub()
    hub.served["model-00001-of-00003.safetensors"] = b"\x00" * len(FILES["model-00001-of-00003.safetensors"])
    with pytest.raises(ImportFailed):
        run(hub, s3)
    assert PREFIX + MANIFEST_NAME not in keys(s3), "staging must not pair the old manifest with new files"
    assert ("delete_object", PREFIX + MANIFEST_NAME) in s3.calls


def test_a_manifest_of_the_same_commit_stays_while_resuming(s3):
    run(FakeHub(), s3)
    s3.calls.clear()
    run(FakeHub(), s3)
    assert ("delete_object", PREFIX + MANIFEST_NAME) not in s3.calls


def test_a_gated_model_without_a_token_stops_before_any_download(s3):
    hub = FakeHub(gated=True)
    with pytest.raises(NotRetryable, match=r"gated .* model.hf_token_secret_arn"):
        run(hub, s3)
    assert not hub.opens
    assert run(FakeHub(gated=True), s3, have_token=True).revision == COMMIT


def test_access_denied_by_s3_is_not_retried(s3, monkeypatch):
    def denied(**kw):
        raise ClientError({"Error": {"Code": "AccessDenied", "Message": "Access Denied"}}, "PutObject")

    monkeypatch.setattr(s3.client, "put_object", denied)
    monkeypatch.setattr(s3.client, "create_multipart_upload", lambda **kw: denied())
    hub = FakeHub()
    with pytest.raises(NotRetryable, match="Pod Identity association"):
        run(hub, s3)
    assert max(hub.opens.values()) == 1


def test_part_size_grows_so_a_file_fits_s3s_part_limit():
    assert weights_import._part_size(100 * MIB, 64 * MIB) == 64 * MIB
    huge = 10_000 * 64 * MIB + 1
    part = weights_import._part_size(huge, 64 * MIB)
    assert part > 64 * MIB
    assert -(-huge // part) <= weights_import.MAX_PARTS


def test_progress_reports_gigabytes_rate_eta_and_skipped_files(caplog):
    now = [0.0]
    progress = Progress(total=756 * 10**9, files=152, interval=10, clock=lambda: now[0])
    now[0] = 600.0
    with caplog.at_level(logging.INFO, logger="pdkit.weights"):
        progress.add(300 * 10**9, file_done=True, skipped=True)
    assert "imported 300.0/756.0 GB (40%), 0.50 GB/s, ETA 15.2 min, 1/152 files (1 already in the bucket)" in caplog.text


# --- the entry point the Job runs ----------------------------------------------------------------------


def argv(*extra):
    return ["--model", MODEL, "--revision", "main", "--bucket", BUCKET, "--prefix", PREFIX, "--region", REGION, "--part-mib", "5", *extra]


def test_entrypoint_imports_and_exits_zero(aws, capsys):
    s3, secrets = aws
    tokens = []
    code = weights_import.main(
        argv(), clients=lambda region, n, sm_region: (s3, secrets), hub_factory=lambda t: tokens.append(t) or FakeHub()
    )
    assert code == 0
    assert tokens == [None]
    assert "import complete: 5 files" in capsys.readouterr().out


@pytest.mark.parametrize("stored", ["hf_secret", json.dumps({"token": "hf_secret"}), json.dumps({"HF_TOKEN": "hf_secret"})])
def test_the_hub_token_comes_from_secrets_manager(aws, capsys, stored):
    s3, secrets = aws
    arn = secrets.create_secret(Name="glm51/hf-token", SecretString=stored)["ARN"]
    tokens = []
    code = weights_import.main(
        argv("--hf-token-secret-arn", arn),
        clients=lambda r, n, sm: (s3, secrets),
        hub_factory=lambda t: tokens.append(t) or FakeHub(gated=True),
    )
    assert code == 0
    assert tokens == ["hf_secret"]
    assert "hf_secret" not in capsys.readouterr().out, "the token is never logged"


def test_the_secret_is_read_in_its_own_region(aws):
    s3, secrets = aws
    regions = []
    arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:hf-AbCdEf"

    def clients(region, n, sm_region):
        regions.append((region, sm_region))
        return s3, secrets

    weights_import.main(argv("--hf-token-secret-arn", arn), clients=clients, hub_factory=lambda t: FakeHub())
    weights_import.main(argv(), clients=clients, hub_factory=lambda t: FakeHub())
    assert regions == [(REGION, "us-east-1"), (REGION, REGION)]


def test_an_unreadable_token_secret_is_not_retryable(aws, capsys):
    s3, secrets = aws
    missing = f"arn:aws:secretsmanager:{REGION}:123456789012:secret:nope-AbCdEf"
    code = weights_import.main(
        argv("--hf-token-secret-arn", missing), clients=lambda r, n, sm: (s3, secrets), hub_factory=lambda t: FakeHub()
    )
    assert code == EXIT_NOT_RETRYABLE
    assert "cannot read the Hub token" in capsys.readouterr().err


def test_exit_codes_tell_the_job_whether_to_retry(aws, capsys):
    s3, secrets = aws
    gated = weights_import.main(argv(), clients=lambda r, n, sm: (s3, secrets), hub_factory=lambda t: FakeHub(gated=True))
    assert gated == EXIT_NOT_RETRYABLE
    hub = FakeHub()
    hub.served["config.json"] = b"{}"
    assert weights_import.main(argv(), clients=lambda r, n, sm: (s3, secrets), hub_factory=lambda t: hub) == weights_import.EXIT_RETRY
    bad_prefix = argv()
    bad_prefix[bad_prefix.index(PREFIX)] = "models/no-slash"
    assert weights_import.main(bad_prefix, clients=lambda r, n, sm: (s3, secrets), hub_factory=lambda t: FakeHub()) == EXIT_NOT_RETRYABLE
    assert "pdkit weights import: error:" in capsys.readouterr().err


def test_the_import_module_needs_nothing_from_pdkit_but_the_manifest():
    """The Job runs it from the serving image: no pydantic, no plan, no CDK; boto3 and huggingface_hub load on use."""
    probe = (
        "import sys, pdkit.pods.weights_import; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pdkit', 'pydantic', 'yaml', 'aws_cdk', 'boto3', 'huggingface_hub')))"
    )
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == str(["pdkit", "pdkit.pods", "pdkit.pods.weights_import", "pdkit.pods.weights_manifest"])


# --- the real Hub client, against a local HTTP server speaking the Hub's API --------------------------


class HubServer:
    """The two Hub endpoints the import uses. LFS files redirect to a "CDN" on another host name
    (localhost vs 127.0.0.1), as the Hub's resolve endpoint does."""

    def __init__(self, files: dict[str, bytes]) -> None:
        self.files = files
        self.requests: list[tuple[str, str | None, str | None]] = []  # (path, Authorization, Range)
        self.refuse: tuple[int, str] | None = None  # (status, X-Error-Code) for every API call
        self.flaky: dict[str, int] = {}  # path -> 503s to answer first
        self.drop_at: dict[str, int] = {}  # path -> offset where the first body stops short
        self.gated = False
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                server.requests.append((self.path, self.headers.get("Authorization"), self.headers.get("Range")))
                path = urlsplit(self.path).path
                if server.refuse:
                    status, code = server.refuse
                    self.send_response(status)
                    self.send_header("X-Error-Code", code)
                    self.send_header("X-Error-Message", "refused by the test")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if path.startswith(f"/api/models/{MODEL}/revision/"):
                    return self.json(server.listing())
                if path.startswith(f"/api/models/{MODEL}/tree/{COMMIT}"):
                    return self.json(server.tree(unquote(path[len(f"/api/models/{MODEL}/tree/{COMMIT}") :]).strip("/")))
                if path.startswith(f"/{MODEL}/resolve/{COMMIT}/"):
                    name = unquote(path.split(f"/resolve/{COMMIT}/", 1)[1])
                    if len(server.files[name]) > LFS_OVER:
                        cdn = f"http://localhost:{self.server.server_address[1]}/cdn/{quote(name)}"
                        self.send_response(302)
                        self.hub_headers(name)
                        self.send_header("Location", cdn)
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    return self.body(name)
                if path.startswith("/cdn/"):
                    return self.body(unquote(path[len("/cdn/") :]))
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def hub_headers(self, name):
                """What the Hub's resolve endpoint adds (huggingface_hub 1.33.0 file_download.py,
                get_hf_file_metadata: X-Repo-Commit, X-Linked-Etag or ETag, X-Linked-Size)."""
                data = server.files[name]
                self.send_header("X-Repo-Commit", COMMIT)
                if len(data) > LFS_OVER:
                    self.send_header("X-Linked-Etag", f'"{sha(data)}"')
                    self.send_header("X-Linked-Size", str(len(data)))
                else:
                    self.send_header("ETag", f'"{git_blob_id(data)}"')

            def json(self, body):
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def body(self, name):
                if server.flaky.get(name):
                    server.flaky[name] -= 1
                    self.send_response(503)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                data = server.files[name]
                start = int(self.headers["Range"].split("=")[1].rstrip("-")) if self.headers.get("Range") else 0
                self.send_response(206 if start else 200)
                if not urlsplit(self.path).path.startswith("/cdn/"):
                    self.hub_headers(name)
                self.send_header("Content-Length", str(len(data) - start))
                self.end_headers()
                stop = server.drop_at.pop(name, None)
                self.wfile.write(data[start:stop] if stop else data[start:])
                if stop:
                    self.close_connection = True

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def tree(self, folder):
        """GET /api/models/<repo>/tree/<rev>/<folder>: the folder's direct children, in the Hub's shape
        (huggingface_hub 1.33.0 hf_api.py, RepoFile / RepoFolder)."""
        entries, folders = [], set()
        for name, data in self.files.items():
            parent, _, _ = name.rpartition("/")
            if parent == folder:
                entry = {"type": "file", "oid": git_blob_id(data), "size": len(data), "path": name}
                if len(data) > LFS_OVER:
                    entry["lfs"] = {"oid": sha(data), "size": len(data), "pointerSize": 134}
                entries.append(entry)
            elif name.startswith(f"{folder}/" if folder else ""):
                sub = name[len(folder) + 1 if folder else 0 :].split("/")[0]
                folders.add(f"{folder}/{sub}" if folder else sub)
        return [{"type": "directory", "oid": "0" * 40, "size": 0, "path": f} for f in sorted(folders)] + entries

    def listing(self):
        siblings = []
        for name, data in self.files.items():
            entry = {"rfilename": name, "size": len(data), "blobId": git_blob_id(data)}
            if len(data) > LFS_OVER:
                entry["lfs"] = {"size": len(data), "sha256": sha(data), "pointerSize": 134}
            siblings.append(entry)
        return {"id": MODEL, "sha": COMMIT, "gated": "manual" if self.gated else False, "private": False, "siblings": siblings}


@pytest.fixture
def hub_server(monkeypatch):
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    server = HubServer(dict(FILES))
    yield server
    server.httpd.shutdown()


def real_hub(server, token="hf_secret"):  # noqa: S107 - a fake token for the local fake Hub
    return weights_import.HfHub(token, endpoint=server.endpoint)


def test_the_hub_client_reads_the_listing_at_one_commit(hub_server):
    snap = real_hub(hub_server).snapshot(MODEL, "main")
    assert snap.commit == COMMIT
    assert not snap.gated
    by_path = {f.path: f for f in snap.files}
    big = FILES["model-00001-of-00003.safetensors"]
    assert by_path["model-00001-of-00003.safetensors"] == HubFile("model-00001-of-00003.safetensors", len(big), sha(big), None)
    assert by_path["config.json"] == HubFile("config.json", len(FILES["config.json"]), None, git_blob_id(FILES["config.json"]))
    assert hub_server.requests[0][0] == f"/api/models/{MODEL}/revision/main?blobs=true"


def test_import_through_the_real_hub_client_keeps_the_token_on_the_hub(hub_server, s3):
    manifest = run(real_hub(hub_server), s3)
    assert {f.path: f.sha256 for f in manifest.files} == {p: sha(d) for p, d in IMPORTED.items()}
    cdn = [auth for path, auth, _ in hub_server.requests if path.startswith("/cdn/")]
    hub = [auth for path, auth, _ in hub_server.requests if not path.startswith("/cdn/")]
    assert cdn, "LFS files came through the redirect"
    assert set(cdn) == {None}, "the token is not sent to the CDN host"
    assert set(hub) == {"Bearer hf_secret"}


def test_a_broken_download_resumes_with_a_range_request(hub_server, s3):
    """HfFileSystem's streaming file reopens a broken GET once with `Range: bytes=<position>-`
    (huggingface_hub 1.33.0 hf_file_system.py, HfFileSystemStreamFile.read/_open_connection), and
    http_stream_backoff retries a 503 first."""
    name = "model-00001-of-00003.safetensors"
    hub_server.drop_at[name] = PART + 2 * MIB + 5
    hub_server.flaky[name] = 1
    run(real_hub(hub_server), s3)
    ranges = [r for path, _, r in hub_server.requests if path == f"/cdn/{name}"]
    assert ranges[-1] == f"bytes={PART}-", "the stream resumes after the last part the upload read"
    assert s3.get_object(Bucket=BUCKET, Key=PREFIX + name)["Body"].read() == FILES[name]


@pytest.mark.parametrize(
    ("status", "code", "message"),
    [
        (403, "GatedRepo", "the model is gated and the token has no access"),
        (401, "RepoNotFound", "does not show zai-org/GLM-5.1-FP8@main to this token"),
        (404, "RevisionNotFound", "no such revision"),
    ],
)
def test_the_hubs_refusals_are_not_retryable(hub_server, status, code, message):
    hub_server.refuse = (status, code)
    with pytest.raises(NotRetryable, match=message):
        real_hub(hub_server).snapshot(MODEL, "main")
    assert len(hub_server.requests) == 1


def test_an_unreachable_hub_names_the_nat_gateway():
    hub = weights_import.HfHub(None, endpoint="http://127.0.0.1:9")
    with pytest.raises(ImportFailed, match="NAT gateway"):
        hub.snapshot(MODEL, "main")

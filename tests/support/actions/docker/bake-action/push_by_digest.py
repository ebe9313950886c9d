"""Push an OCI layout tarball's image to REF (a repository, no tag) by digest, as BuildKit's
`push-by-digest=true` does: every blob, then the manifest (or index) under its digest, no tag.
Plain HTTP to a loopback registry without auth (the act run's registry); prints the digest."""

import hashlib
import json
import sys
import tarfile

import requests


def main(archive: str, ref: str) -> None:
    host, _, name = ref.partition("/")
    base = f"http://{host}/v2/{name}"
    with tarfile.open(archive) as tar:

        def blob(digest: str) -> bytes:
            member = tar.extractfile("blobs/" + digest.replace(":", "/"))
            assert member is not None, digest
            return member.read()

        def push_blob(digest: str) -> None:
            if requests.head(f"{base}/blobs/{digest}", timeout=30).status_code == 200:
                return
            start = requests.post(f"{base}/blobs/uploads/", timeout=30)
            start.raise_for_status()
            where = start.headers["Location"]
            url = where if where.startswith("http") else f"http://{host}{where}"
            sep = "&" if "?" in url else "?"
            requests.put(f"{url}{sep}digest={digest}", data=blob(digest), timeout=300).raise_for_status()

        def push_manifest(desc: dict) -> None:
            body = blob(desc["digest"])
            doc = json.loads(body)
            for child in doc.get("manifests", []):
                push_manifest(child)
            for layer in [doc.get("config"), *doc.get("layers", [])]:
                if layer:
                    push_blob(layer["digest"])
            assert "sha256:" + hashlib.sha256(body).hexdigest() == desc["digest"]
            headers = {"Content-Type": desc["mediaType"]}
            put = requests.put(f"{base}/manifests/{desc['digest']}", data=body, headers=headers, timeout=60)
            put.raise_for_status()

        index = json.load(tar.extractfile("index.json"))  # type: ignore[arg-type]
        top = index["manifests"][0]
        push_manifest(top)
        print(top["digest"])


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

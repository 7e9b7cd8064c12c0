"""What looks like a secret: by a file's name (the short list), a registry file with
credentials, and by content through detect-secrets (its default plugins and filters)."""

from __future__ import annotations

import base64
import secrets

import pytest

from genesis.repo.secrets import has_credentials, secret_name
from genesis.repo.secretscan import scanner


@pytest.mark.parametrize("path", [".env", "app/.env", ".env.local", ".env.production", "certs/server.pem",
                                  "tls.key", "store.p12", "store.pfx", "keys.jks", "id_rsa", "home/.ssh/id_ed25519",
                                  "id_ecdsa", "id_dsa", ".netrc", "_netrc", ".git-credentials", ".htpasswd",
                                  "credentials.json", "config/client_secret_123.apps.json"])
def test_files_that_hold_credentials_by_their_nature_are_secrets_by_name(path):
    assert secret_name(path) is not None


@pytest.mark.parametrize("path", [".env.example", "app/.env.sample", ".env.template", ".env.dist", ".env.defaults",
                                  "id_rsa.pub", "id_ed25519.pub", "environment.py", "keyboard.py", "monkey.txt",
                                  "README.md", "src/env/settings.py", "credentials.md", "public.key.txt"])
def test_templates_public_keys_and_ordinary_files_are_not(path):
    assert secret_name(path) is None


def test_a_registry_file_is_a_secret_only_with_credentials_in_it():
    assert has_credentials(".npmrc", b"//registry.npmjs.org/:_authToken=npm_abcdef\n")
    assert has_credentials("web/.npmrc", b"_auth = dXNlcjpwYXNz\n")
    assert has_credentials(".pypirc", b"[pypi]\nusername = me\npassword = hunter22\n")
    assert has_credentials(".npmrc", b"registry=https://registry.example.invalid/\n") is None
    assert has_credentials(".pypirc", b"[distutils]\nindex-servers = pypi\n") is None
    assert has_credentials("notes.txt", b"password = hunter22\n") is None


def test_detect_secrets_finds_keys_in_content_and_says_which_kind_and_line_never_the_value():
    aws = base64.b64encode(secrets.token_bytes(30)).decode()
    config = f'import os\nAWS_ACCESS_KEY_ID = "AKIA{secrets.token_hex(8).upper()}"\nsecret_key = "{aws}"\n'.encode()
    block = b"-----BEGIN RSA PRIVATE KEY-----\n" + base64.b64encode(secrets.token_bytes(48)) + \
        b"\n-----END RSA PRIVATE KEY-----\n"
    with scanner() as scan:
        found = scan("config.py", config)
        key = scan("notes.txt", block)
        plain = scan("main.py", b"def add(a, b):\n    return a + b\n")
        allowed = scan("test_x.py", f'token = "{aws}"  # pragma: allowlist secret\n'.encode())
        binary = scan("image.bin", b"\x00\xff\xfe" * 100)
    assert {f.kind for f in found} >= {"AWS Access Key"} and {f.line for f in found} <= {2, 3}
    assert aws not in repr(found)
    assert [f.kind for f in key] == ["Private Key"]
    assert plain == () and allowed == () and binary == ()


def _full_scan(folder, path: str, data: bytes) -> bool:
    """What detect-secrets itself finds in data as a file of that name, with no prefilter."""
    from detect_secrets.core.scan import scan_file

    target = folder / path.rsplit("/", 1)[-1]
    target.write_bytes(data)
    try:
        return any(True for _ in scan_file(str(target)))
    finally:
        target.unlink()


def _samples() -> list[tuple[str, bytes]]:
    token = secrets.token_urlsafe(30)
    b64 = base64.b64encode(secrets.token_bytes(30)).decode()
    hexed = secrets.token_hex(16)
    lines = [f'KEY = "{b64}"', f"key: {b64}", f"value = {hexed}", f'x = "{hexed}"', f"password = '{token}'",
             'db_pass = "hunter2hunter2"', f"AWS_ACCESS_KEY_ID = AKIA{secrets.token_hex(8).upper()}",
             "-----BEGIN RSA PRIVATE KEY-----", "url = https://user:s3cr3tpass@example.com/x",
             f"slack = xoxb-{secrets.randbelow(10**11)}-{secrets.randbelow(10**11)}-{secrets.token_hex(12)}",
             f"ghp_{secrets.token_hex(18)}", f"sk_live_{secrets.token_hex(12)}", f"npm_{secrets.token_hex(18)}",
             "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlc2lnbmF0dXJl", "server = 8.8.8.8",
             f"[prod]\napi = {b64}", f"---\ncreds:\n  token: {b64}\n", f"{token}", f"Secret: {hexed}"]
    names = ["app.py", "main.go", "App.java", "index.js", "config.yaml", "settings.ini", "app.conf", "notes.txt",
             "Makefile", "data.json", "README.md", "main.tf", "lib.c"]
    return [(name, f"# header\n{line}\n".encode()) for name in names for line in lines]


def test_a_file_the_prefilter_passes_over_is_one_detect_secrets_finds_nothing_in(tmp_path):
    from detect_secrets.settings import default_settings

    from genesis.repo.prefilter import triggers

    ordinary = [("src/m.py", b'"""Module 7."""\n\nNAME = "item-7"\n\n\ndef value_7(x):\n    return x * 7\n'),
                ("web/app.js", b"export function add(a, b) {\n  return a + b;\n}\n")]
    with default_settings():
        found_by = triggers()
        assert found_by is not None  # every default plugin is of a kind it knows
        found = 0
        for path, data in _samples() + ordinary:
            if _full_scan(tmp_path, path, data):
                found += 1
                assert found_by.could_fire(path, data), (path, data)
        assert found > 100  # the samples are secrets to detect-secrets, in most of the files
        assert not any(found_by.could_fire(p, d) for p, d in ordinary)  # and plain code is not even scanned
    with scanner() as look:  # the same asked of a whole batch at once, the ordinary files between the others
        files = [f for pair in zip(_samples(), ordinary * len(_samples())) for f in pair] + [("bin.dat", b"\xff\xfe")]
        batch = look.needing(files)
        assert batch == [look.needs(p, d) for p, d in files]

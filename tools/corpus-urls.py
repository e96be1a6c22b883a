#!/usr/bin/env python3
"""An independent reading of the precision corpus (tests/fixtures/corpus):
the hosts each fixture names in URL or e-mail context, found with plain
regular expressions over the text of its files (archives opened with
Python's tarfile and zipfile; executables, images and fonts skipped), owners
on the code forges as HOST/OWNER. It prints, per fixture, what the reviewed
list (FIXTURE.hosts) lacks and what it has beyond these: the first must be
empty, the second is the bare mentions a person reviews by hand.

    python3 tools/corpus-urls.py [FIXTURE...]
"""
import gzip, io, json, re, sys, tarfile, zipfile, pathlib

DIR = pathlib.Path(__file__).resolve().parent.parent / "tests/fixtures/corpus"
BINARY = (b"\x7fELF", b"MZ", b"\xfe\xed\xfa", b"\xce\xfa\xed\xfe", b"\xcf\xfa\xed\xfe",
          b"\xca\xfe\xba\xbe", b"\0asm", b"\x89PNG", b"\xff\xd8\xff", b"GIF8", b"wOF",
          b"OTTO", b"\0\x01\0\0", b"%PDF", b"RIFF")
URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:(?://|\\/\\/)([^/\\\s\"'<>()\[\]{}|^`,;?#]+)((?:/|\\/)[A-Za-z0-9._~%-]*(?:(?:/|\\/)[A-Za-z0-9._~%-]*)?)?")
MAIL = re.compile(r"[A-Za-z0-9._%+-]+@([A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+)")
FAMILIES = {
    "github.com": ("github.com", 0), "gist.github.com": ("github.com", 0),
    "raw.githubusercontent.com": ("github.com", 0), "codeload.github.com": ("github.com", 0),
    "gist.githubusercontent.com": ("github.com", 0), "api.github.com": ("github.com", 1),
    "uploads.github.com": ("github.com", 1), "gitlab.com": ("gitlab.com", 0),
    "bitbucket.org": ("bitbucket.org", 0), "codeberg.org": ("codeberg.org", 0),
}
OWNER = re.compile(r"^[A-Za-z0-9._-]+$")


def texts(name, data, depth=0):
    if depth > 4:
        return
    if data[:2] == b"\x1f\x8b":
        yield from texts(name, gzip.decompress(data), depth + 1)
    elif data[:4] == b"PK\x03\x04":
        z = zipfile.ZipFile(io.BytesIO(data))
        for n in z.namelist():
            yield from texts(n, z.read(n), depth + 1)
    elif len(data) > 262 and data[257:262] == b"ustar":
        t = tarfile.open(fileobj=io.BytesIO(data))
        for m in t.getmembers():
            if m.isfile():
                yield from texts(m.name, t.extractfile(m).read(), depth + 1)
    elif not data.startswith(BINARY):
        yield name, data.decode("utf-8", "replace")


def key(host, path):
    host = host.split("@")[-1].split(":")[0].strip(".").lower()
    if "." not in host or not re.search(r"\.[a-z]{2,}$", host):
        return None
    if host in FAMILIES:
        root, skip = FAMILIES[host]
        segs = [s for s in (path or "").replace("\\/", "/").split("/")]
        segs = segs[1:] if segs and segs[0] == "" else segs
        if skip:
            if len(segs) < 2 or segs[0].lower() not in ("repos", "users", "orgs"):
                return None
            segs = segs[1:]
        owner = segs[0] if segs else ""
        if not owner or not OWNER.match(owner) or owner in (".", ".."):
            return None
        return f"{root}/{owner.lower()}"
    return host


def read(fixture):
    found = set()
    for _, text in texts(fixture.name, fixture.read_bytes()):
        for m in URL.finditer(text):
            k = key(m.group(1), m.group(2))
            if k:
                found.add(k)
        for m in MAIL.finditer(text):
            k = key(m.group(1), None)
            if k and not re.search(r"\.(png|jpg|gif|svg|js|css)$", k):
                found.add(k)
    return found


def main(names):
    fixtures = [DIR / n for n in names] or sorted(p for p in DIR.iterdir()
                                                  if (DIR / (p.name + ".hosts")).exists())
    for f in fixtures:
        urls = read(f)
        listed = {l.strip() for l in (DIR / (f.name + ".hosts")).read_text().splitlines()
                  if l.strip() and not l.startswith("#")}
        print(f"== {f.name}: {len(urls)} in URL or e-mail context, {len(listed)} reviewed")
        print("  lacks:", " ".join(sorted(urls - listed)) or "-")
        print("  beyond:", " ".join(sorted(listed - urls)) or "-")


if __name__ == "__main__":
    main(sys.argv[1:])

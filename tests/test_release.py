"""A release a user can adopt: one version, a CHANGELOG in Keep a Changelog's form, and a CRD that
changes between releases only as docs/upgrading-the-crd.md says (hack/release.py,
hack/crd_compat.py). `make release` itself, with its image builds, is `make test-release`."""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

import crd_compat  # hack/crd_compat.py
import release  # hack/release.py
from scorestream import monitoring

REPO = Path(__file__).resolve().parents[1]


def test_every_copy_of_the_version_is_pyproject_s():
    assert release.copies(), "no copy found: the patterns no longer match the chart"
    assert {c.path for c in release.copies()} >= {"charts/scorestream/Chart.yaml", "Dockerfile"}
    assert not release.diverging(), (f"copies of the version differ from pyproject.toml's {release.version()}: "
                                     "python hack/release.py bump X.Y.Z moves them all\n"
                                     + "\n".join(map(str, release.diverging())))


def test_bump_moves_the_source_and_every_copy(tmp_path):
    paths = {c.path for c in release.copies()} | {"pyproject.toml"}
    for rel in paths:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / rel, tmp_path / rel)
    moved = release.bump("7.8.9", tmp_path)
    assert release.version(tmp_path) == "7.8.9" and not release.diverging(tmp_path)
    assert len(moved) == len(release.copies())
    chart = yaml.safe_load((tmp_path / "charts/scorestream/Chart.yaml").read_text())
    assert chart["version"] == chart["appVersion"] == "7.8.9"
    with pytest.raises(release.ReleaseError):
        release.bump("7.8", tmp_path)


# ----------------------------------------------------------------------------- the CRD checker
SCHEMA = {"type": "object", "properties": {
    "spec": {"type": "object", "required": ["topic"], "properties": {
        "topic": {"type": "string", "maxLength": 249},
        "mode": {"type": "string", "enum": ["a", "b"], "default": "a"},
        "rules": {"type": "array", "items": {"type": "object", "properties": {"limit": {"type": "number", "minimum": 0}}}},
        "conf": {"type": "object", "additionalProperties": {"type": "string"},
                 "x-kubernetes-validations": [{"rule": "self.all(k, k != 'x')"}]}}},
    "status": {"type": "object", "properties": {"phase": {"type": "string"}}}}}


def crd(schema: dict) -> dict:
    return {"spec": {"scope": "Namespaced", "names": {"kind": "Thing", "plural": "things", "shortNames": ["th"]},
                     "versions": [{"name": "v1", "served": True, "subresources": {"status": {}},
                                   "schema": {"openAPIV3Schema": schema}}]}}


def changed(edit) -> list[crd_compat.Change]:
    new = copy.deepcopy(SCHEMA)
    edit(new["properties"])
    return crd_compat.breaking_changes(crd(SCHEMA), crd(new))


@pytest.mark.parametrize("edit, path, kind", [
    (lambda s: s["spec"]["properties"].pop("mode"), "spec.mode", "removed field"),
    (lambda s: s["status"]["properties"].pop("phase"), "status.phase", "removed field"),
    (lambda s: s["spec"]["properties"]["topic"].update(type="integer"), "spec.topic", "type changed"),
    (lambda s: s["spec"]["properties"]["mode"].pop("default"), "spec.mode", "removed default"),
    (lambda s: s["spec"]["properties"]["mode"].update(default="b"), "spec.mode", "changed default"),
    (lambda s: s["spec"]["properties"]["mode"].update(enum=["a"]), "spec.mode", "tightened validation"),
    (lambda s: s["spec"]["properties"]["topic"].update(maxLength=100), "spec.topic", "tightened validation"),
    (lambda s: s["spec"]["properties"]["topic"].update(pattern="^[a-z]+$"), "spec.topic", "tightened validation"),
    (lambda s: s["spec"].update(required=["topic", "mode"]), "spec.mode", "tightened validation"),
    (lambda s: s["spec"]["properties"]["rules"]["items"]["properties"]["limit"].update(minimum=1),
     "spec.rules[].limit", "tightened validation"),
    (lambda s: s["spec"]["properties"]["conf"]["additionalProperties"].update(maxLength=10), "spec.conf.*",
     "tightened validation"),
    (lambda s: s["spec"]["properties"]["conf"].update({"x-kubernetes-validations": [{"rule": "self.all(k, k != 'x' && k != 'y')"}]}),
     "spec.conf", "tightened validation"),
    (lambda s: s["spec"].update({"x-kubernetes-validations": [{"rule": "self.topic != 'x'"}]}), "spec",
     "tightened validation"),
])
def test_the_checker_finds_what_breaks(edit, path, kind):
    assert [(c.path, c.kind) for c in changed(edit)] == [(path, kind)]


@pytest.mark.parametrize("edit", [
    lambda s: s["spec"]["properties"].update(extra={"type": "string", "default": "z", "pattern": "^z$"}),
    lambda s: s["spec"]["properties"]["mode"].update(enum=["a", "b", "c"]),
    lambda s: s["spec"]["properties"]["topic"].update(maxLength=300, description="the topic"),
    lambda s: s["spec"]["properties"]["conf"].update({"x-kubernetes-validations": []}),
    lambda s: s["spec"]["properties"]["rules"]["items"]["properties"]["limit"].update(minimum=-1),
    lambda s: s["status"]["properties"]["phase"].update(enum=["Ready"]),  # the operator writes status
    # a rule only a field the old CRD lacked can trip: no stored resource has it
    lambda s: s["spec"].update(properties={**s["spec"]["properties"], "tls": {"type": "object"}},
                               **{"x-kubernetes-validations": [{"rule": "!has(self.tls) || self.topic != 'x'"}]}),
])
def test_the_checker_lets_compatible_changes_pass(edit):
    assert changed(edit) == []


def test_a_version_gone_or_a_short_name_removed_breaks():
    new = crd(SCHEMA)
    new["spec"]["names"]["shortNames"] = []
    new["spec"]["versions"][0]["served"] = False
    assert [c.kind for c in crd_compat.breaking_changes(crd(SCHEMA), new)] == ["name removed", "version no longer served"]


# ----------------------------------------------------------------------------- the CRD against the last release
def test_the_last_release_s_crd_is_the_one_its_commit_generated():
    last = release.last_release()
    shown = subprocess.run(["git", "show", f"{last['commit']}:{release.CRD}"], cwd=REPO, capture_output=True, text=True)
    if shown.returncode != 0:
        pytest.skip(f"{last['commit']} is not in this clone (shallow?): {shown.stderr.strip()}")
    assert shown.stdout == (REPO / last["crd"]).read_text()


def test_every_breaking_change_since_the_last_release_is_a_breaking_entry_of_the_changelog():
    unlisted = release.unlisted_breaking_changes()
    assert not unlisted, ("CRD changes since the last release that break (docs/upgrading-the-crd.md) and that no "
                          "**BREAKING** entry of CHANGELOG.md names by its field:\n"
                          + "\n".join(str(c)[:300] for c in unlisted)
                          + "\n(or, where the change refuses nothing the old CRD admitted, say why in "
                          f"{release.JUDGED})")


def test_an_unlisted_breaking_change_fails_the_check(tmp_path):
    for rel in (release.RECORD, release.JUDGED, release.CRD, release.CHANGELOG, Path(release.last_release()["crd"])):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / rel, tmp_path / rel)
    text = (tmp_path / release.CHANGELOG).read_text()
    (tmp_path / release.CHANGELOG).write_text(text.replace("`spec.kafka.properties` refuses", "Kafka settings refuse"))
    assert {c.path for c in release.unlisted_breaking_changes(tmp_path)} == {"spec.kafka.properties"}


def test_every_compatibility_judgement_is_of_a_change_the_checker_finds():
    assert not release.stale_judgements(), f"judgements in {release.JUDGED} of changes no longer made"
    assert all(j["why"].strip() for j in release.judgements())


def test_the_version_moved_as_the_crd_s_changes_since_the_last_release_ask():
    assert release.version_fits_the_crd() is None, release.version_fits_the_crd()
    assert release.semver_key(release.version()) >= release.semver_key(release.last_release()["version"])


# ----------------------------------------------------------------------------- the changelog
def test_the_changelog_is_keep_a_changelog_s():
    text = (REPO / release.CHANGELOG).read_text()
    sections = release.changelog()
    assert sections[0].title == "Unreleased" and sections[0].date is None
    versions = [s for s in sections[1:]]
    assert versions and all(s.date for s in versions), "every release has its date: ## [X.Y.Z] - YYYY-MM-DD"
    assert versions == sorted(versions, key=lambda s: release.semver_key(s.title), reverse=True), "newest first"
    assert [s.date for s in versions] == sorted((s.date for s in versions), reverse=True)
    headings = re.findall(r"^## .*$", text, re.M)
    assert len(headings) == len(sections), f"a heading not of the form ## [X.Y.Z] - YYYY-MM-DD: {headings}"
    kinds = set(re.findall(r"^### (.*)$", text, re.M))
    assert kinds <= {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}, kinds
    for s in sections:
        assert re.search(rf"^\[{re.escape(s.title)}\]: \S+$", text, re.M), f"no link for [{s.title}]"
        marked = s.breaking_entries()
        for entry in s.entries():
            assert entry in marked or not re.search(r"\bBREAKING\b", entry), \
                f"a BREAKING mark where a reader scanning the list misses it: {entry[:80]}"
    recorded = {r["version"]: r["date"] for r in release.record()["release"]}
    assert {s.title: s.date for s in versions} == recorded, "the changelog's releases are releases.toml's"


def test_the_metric_renames_name_the_code_s_series():
    """The migration table's new names are series the code exports and its 0.1.0 names are not;
    a renamed label is on the series named, the old one on none."""
    table = re.search(r"^  \| 0\.1\.0 \| .*?\n((?:  \|.*\n)+)", (REPO / release.CHANGELOG).read_text(), re.M)
    assert table, "the metric renames' table is gone from CHANGELOG.md"
    exported = {f.name: f for f in vars(monitoring).values() if isinstance(f, monitoring.Family)}
    for row in table.group(1).splitlines()[1:]:
        old, new = row.split("|")[1:3]
        if old.strip().startswith("label"):
            (old_label,), (new_label,) = re.findall(r"label `(\w+)`", old), re.findall(r"label `(\w+)`", new)
            named = re.findall(r"`(scorestream_\w+)`", old)
            assert named and all(new_label in exported[n].labels for n in named), row
            assert not any(old_label in f.labels for f in exported.values()), row
            continue
        old_names, new_names = (re.findall(r"`(scorestream_\w+)", cell) for cell in (old, new))
        assert set(new_names) <= set(exported) and not set(old_names) & set(exported), row


def test_a_release_is_checked_then_recorded_as_the_next_comparison_s_base(tmp_path):
    """`make release`'s gate and record on a committed copy of the files they read: refused until
    the CHANGELOG dates the version, then recorded with its commit and CRD, the judgements gone."""
    v = release.version()
    for rel in ({c.path for c in release.copies()} | {"pyproject.toml", str(release.CRD), str(release.CHANGELOG),
                                                       str(release.RECORD), str(release.JUDGED),
                                                       *(r["crd"] for r in release.record()["release"])}):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / rel, tmp_path / rel)
    git = lambda *a: subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *a], cwd=tmp_path,
                                    check=True, capture_output=True, text=True).stdout.strip()
    git("init", "-q")
    git("add", "-A")
    git("commit", "-qm", "tree")
    assert any("has no `## [" in p for p in release.check(v, tmp_path))
    changelog = (tmp_path / release.CHANGELOG).read_text()
    changelog = changelog.replace("## [Unreleased]\n", f"## [Unreleased]\n\n## [{v}] - 2099-01-01\n", 1)
    (tmp_path / release.CHANGELOG).write_text(changelog + f"[{v}]: https://example.invalid/v{v}\n")
    assert release.check(v, tmp_path) == ["the work tree has uncommitted changes: a release is cut from a commit"]
    git("commit", "-qam", "the notes")
    assert release.check(v, tmp_path) == []
    release.record_release(v, tmp_path)
    last = release.last_release(tmp_path)
    assert (last["version"], last["date"], last["commit"]) == (v, "2099-01-01", git("rev-parse", "HEAD"))
    assert (tmp_path / last["crd"]).read_text() == (REPO / release.CRD).read_text()
    assert release.judgements(tmp_path) == [] and release.unlisted_breaking_changes(tmp_path) == []
    assert release.bump_needed(tmp_path) is None and release.check(v, tmp_path)  # released: not again

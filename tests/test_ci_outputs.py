"""runner.report.ci: GitHub's workflow-command format and job summary, byte for byte."""

from __future__ import annotations

from runner.report.ci import annotation, append_step_summary, publish


def test_annotation_escapes_as_github_documents():
    # Data keeps ':' and ',' but not %, CR, LF; properties escape all five.
    assert annotation("error", "50% off\r\nsecond: line, more") == (
        "::error::50%25 off%0D%0Asecond: line, more")
    assert annotation("warning", "m", title="FID: range, low", file="a,b.py") == (
        "::warning title=FID%3A range%2C low,file=a%2Cb.py::m")


def test_step_summary_is_appended_only_when_github_names_a_file(tmp_path, monkeypatch):
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    assert append_step_summary("## x") is None
    target = tmp_path / "summary"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(target))
    assert append_step_summary("## first\n") == target
    append_step_summary("## second")
    assert target.read_text() == "## first\n\n## second\n\n"


def test_publish_annotates_only_under_github_actions(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "s.md"))
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    publish("## run", errors=[("completeness", "3 missing")], warnings=[("Subset", "of 4")])
    assert capsys.readouterr().out == ""
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    publish("## run", errors=[("completeness", "3 missing")], warnings=[("Subset", "of 4")])
    assert capsys.readouterr().out.splitlines() == [
        "::error title=completeness::3 missing", "::warning title=Subset::of 4"]
    assert (tmp_path / "s.md").read_text() == "## run\n\n## run\n\n"

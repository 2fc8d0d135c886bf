"""The store's de-duplication of re-imported -J files (issue 24 item 6)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

from ncclbench.store import ResultStore, store_imported
from ncclbench.store.importers import load_file

JSON_FIXTURE = Path(__file__).parent / "fixtures" / "nccl_tests_output" / "all_reduce_4proc_per_iter.json"


def test_json_reimport_deduplicates_by_content_like_text(tmp_path):
    """The same -J document re-imported re-indented, with CRLF or keys reordered is the
    same run (text logs are keyed by their lines, not bytes); a changed value is not."""
    doc = json.loads(Path(JSON_FIXTURE).read_text())
    pretty = tmp_path / "pretty.json"
    pretty.write_text(json.dumps(doc, indent=4).replace("\n", "\r\n"))
    reordered = tmp_path / "reordered.json"
    reordered.write_text(json.dumps(dict(reversed(list(doc.items())))))
    changed = tmp_path / "changed.json"
    doc2 = json.loads(Path(JSON_FIXTURE).read_text())
    doc2["results"][0]["out_of_place"]["time"] = 12345.0
    changed.write_text(json.dumps(doc2))
    with ResultStore(tmp_path / "r.sqlite") as s:
        [(_, first, new)] = store_imported(s, load_file(JSON_FIXTURE))
        assert new
        for again in (pretty, reordered):
            assert [(rid, n) for _, rid, n in store_imported(s, load_file(again))] == [(first, False)]
        assert [n for _, _, n in store_imported(s, load_file(changed))] == [True]
        assert s.count_runs() == 2


def test_json_import_matches_a_store_keyed_by_file_bytes(tmp_path):
    """Stores written before content keys hold JSON imports keyed by the file's bytes:
    re-importing that file is still not a new run."""
    [run] = load_file(JSON_FIXTURE)
    with ResultStore(tmp_path / "r.sqlite") as s:
        old = dataclasses.replace(run, content_hash="json:" + hashlib.sha256(Path(JSON_FIXTURE).read_bytes()).hexdigest())
        [(_, rid, _)] = store_imported(s, [old])
        assert [(r, n) for _, r, n in store_imported(s, [run])] == [(rid, False)]

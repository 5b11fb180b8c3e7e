"""The runner's one input boundary: every file and flag a user hands the runner is read here.

Each reader bounds what it accepts (size, nesting depth, numbers: finite, in range, integer
where an integer is meant; text encoding) and answers anything else with the runner's one
error type, `RunnerError`, naming the file, the field and the fix. So the code behind the
boundary only ever sees well-formed values, and no hostile or careless input reaches a user
as a traceback, hangs, or grows memory without end.

- `fields`: a config mapping read into the dataclass it fills, driven by its fields and
  type hints (profiles, layouts, model configs, IREE CI's test files): the one error shape
  and the one unknown-key check.
- `limits`: bounded reads of files and text, depth and number checks shared by the readers.
- `jsonfile`: JSON (configs, test-suite files, model_index.json, run records).
- `yamlfile`: YAML (profiles, model configs, `--set` values): JSON-shaped, no anchors,
  aliases or tags.
- `captions`: MLPerf's tab-separated captions file.
- `userconf`: LoadGen user.conf/audit.config values, typed as LoadGen reads them.
- `safetensors`: a safetensors file's header.
- `expression`: pytest-style `-m`/`-k` expressions, bounded before they are parsed.
- `cliargs`: argparse `type=` functions for numeric flags.
- `iree_build`: the one grammar naming an IREE build (`wheels:`, `commit:`, `source:`,
  `build-dir:`), wherever a command takes one.
- `paths`: references read from a file resolve inside the directory they are relative to;
  a path the user named that is not there is answered with the likeliest fix.
"""

__all__ = ["captions", "cliargs", "expression", "fields", "iree_build", "jsonfile",
           "limits", "paths", "safetensors", "userconf", "yamlfile"]

"""The `autotune` command line (Click): `main` holds the group and turns typed errors into one line and
an exit code; `options` spells every shared flag once; `output` formats what commands print;
`progress` shows a running study. One module per family of verbs: `study` (search, best, trials,
confirm), `models` (models, quantize), `pull`, `fleet` (nightly, presets), `report`.

Commands are thin: they parse options, call one library function and print. Nothing outside this
package imports it.
"""

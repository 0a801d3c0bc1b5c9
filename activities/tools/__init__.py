"""The tools at work: `registry` builds one activity per tool of the catalogue, `builtin` and
`notes` implement the built-in ones, the rest confines and bounds what they start."""

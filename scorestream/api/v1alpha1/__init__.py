"""The scorestream.dev/v1alpha1 API: the ModelServing's spec and status (`modelserving`) and the
control annotations' values (`controls`). The kubectl plugin and the CLI read the resource through
this package alone, without the operator (tests/test_layers.py)."""

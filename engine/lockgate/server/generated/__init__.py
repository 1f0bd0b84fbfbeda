"""Code generated from ../protos/*.proto by `python -m lockgate.server.codegen`. Do not edit."""

"""The params schema, one module per stage section (:mod:`stages.params.base` says how they fit together).

Deliberately empty: importing ``stages.params.X`` runs this file first, so anything here would be in every stage's
import closure, and so in every stage's DVC code deps.
"""

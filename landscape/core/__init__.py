"""The objective of every analysis.

Parameter dicts (params), the Objective (objective) and the front half that builds it from a model source and a
dataset (front).
"""

"""The configuration, validated once: models, evals, agents and their kinds, the matrix of cells, sites and paths.

Owns every reading of config files and site files (``load``, ``sites``), the JSON schemas, the agent-kind
registry (``kinds``), path-safe names (``naming``) and where each artifact lives (``layout``). It must not import
``cluster``, ``launch``, ``stages``, ``standins`` or ``ops``: everything else asks this package, never the raw YAML.
"""

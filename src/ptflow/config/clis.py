# TEMPORARY shim while the CLI modules are being written; replaced by the package ptflow/config/clis/.
from ptflow.stages.train.clis import *  # noqa: F403
from ptflow.stages.train.clis import CLIS, NODE_MAJOR, SCRIPTED, build_arg, cell_environment, prepare_cli_home  # noqa: F401

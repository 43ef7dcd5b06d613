"""Where the kit's embedded data lives (no imports beyond the standard library).

``data/tiny-llama`` is the starting policy (and reference policy) that ``tba-lab sft`` writes;
``data/arithmetic`` holds the synthetic GSM8K-format task it was trained on.
"""
from pathlib import Path

REPO_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = REPO_DIR / "data"
DEFAULT_MODEL_DIR = DATA_DIR / "tiny-llama"
DEFAULT_TASK_DIR = DATA_DIR / "arithmetic"

"""What the test modules share: the repository's paths, tiny checkpoints and models, the main job's record."""

import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"

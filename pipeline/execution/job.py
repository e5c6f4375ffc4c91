"""What Hydra knows about a job (:class:`JobInfo`): light to import, so ``ragtrack run`` checks the
settings and reads the dataset before it imports the stages (a mistake is told in about a second)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class JobInfo:
    """What Hydra knows about the job; empty when called outside Hydra."""

    choices: dict = field(default_factory=dict)
    default_choices: dict = field(default_factory=dict)  # logged are the choices that differ from these
    overrides: list[str] = field(default_factory=list)
    sweep: str | None = None
    hydra_dir: Path | None = None
    report: bool = True  # print the job's table and links at its end (``ragtrack reproduce`` prints its own)

    @property
    def hydra_records(self) -> list[Path]:
        """Hydra's records of the job: ``.hydra/*.yaml`` and a sweep's ``multirun.yaml``."""
        records = sorted(self.hydra_dir.glob("*.yaml")) if self.hydra_dir and self.hydra_dir.is_dir() else []
        if self.sweep and (Path(self.sweep) / "multirun.yaml").is_file():
            records.append(Path(self.sweep) / "multirun.yaml")
        return records

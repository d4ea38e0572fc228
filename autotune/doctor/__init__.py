"""`autotune doctor`: what a new machine has and whether it runs. The llama.cpp builds autotune would
use, as each reports itself (autotune.llamacpp.builds), the GPUs this process sees, and a 4-token decode
on each engine (`decodes`: in-process in the crash-isolated worker, and on llama-server), then the
warnings those facts call for (`findings`), gathered into one report (`report`).
"""

from autotune.doctor.report import DoctorReport, examine

__all__ = ["DoctorReport", "examine"]

"""/proc/cpuinfo of real x86 CPUs, for tests of what autotune builds llama.cpp with on each."""

from __future__ import annotations

from pathlib import Path

#: an Intel Xeon Sapphire Rapids VM's flags line, AMX reported
SAPPHIRE_RAPIDS = (
    "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ss ht syscall nx "
    "pdpe1gb rdtscp lm constant_tsc rep_good nopl xtopology nonstop_tsc cpuid tsc_known_freq pni pclmulqdq ssse3 fma cx16 "
    "pcid sse4_1 sse4_2 x2apic movbe popcnt tsc_deadline_timer aes xsave avx f16c rdrand hypervisor lahf_lm abm "
    "3dnowprefetch invpcid_single ssbd ibrs ibpb stibp ibrs_enhanced fsgsbase tsc_adjust bmi1 hle avx2 smep bmi2 erms "
    "invpcid rtm avx512f avx512dq rdseed adx smap avx512ifma clflushopt clwb avx512cd sha_ni avx512bw avx512vl xsaveopt "
    "xsavec xgetbv1 xsaves avx_vnni avx512_bf16 wbnoinvd arat avx512vbmi umip pku ospke waitpkg avx512_vbmi2 gfni vaes "
    "vpclmulqdq avx512_vnni avx512_bitalg tme avx512_vpopcntdq rdpid cldemote movdiri movdir64b fsrm md_clear serialize "
    "tsxldtrk amx_bf16 avx512_fp16 amx_tile amx_int8 flush_l1d arch_capabilities"
)
#: an Intel Sandy Bridge: AVX, but no AVX2, FMA, F16C or BMI2
SANDY_BRIDGE = (
    "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush dts acpi mmx fxsr sse sse2 ss ht tm "
    "pbe syscall nx rdtscp lm constant_tsc arch_perfmon pebs bts rep_good nopl xtopology nonstop_tsc cpuid aperfmperf pni "
    "pclmulqdq dtes64 monitor ds_cpl vmx est tm2 ssse3 cx16 xtpr pdcm pcid sse4_1 sse4_2 x2apic popcnt tsc_deadline_timer "
    "aes xsave avx lahf_lm epb pti tpr_shadow vnmi flexpriority ept vpid xsaveopt dtherm ida arat pln pts"
)


def write_cpuinfo(folder: Path, flags: str, processors: int = 2) -> Path:
    """A /proc/cpuinfo text of `processors` identical processors with this flags line."""
    blocks = [
        f"processor\t: {i}\nvendor_id\t: GenuineIntel\nmodel name\t: Stand-in CPU\nflags\t\t: {flags}\n"
        f"bugs\t\t: spectre_v1\n"
        for i in range(processors)
    ]
    path = folder / "cpuinfo"
    path.write_text("\n".join(blocks))
    return path

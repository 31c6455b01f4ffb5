"""Machine fingerprints: parsing /proc/cpuinfo and sysfs fixtures, matching, and `perfsuite machine`."""

import ast
import dataclasses
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from perfsuite.measure import machine
from perfsuite.measure.gpu import GpuIdentity
from perfsuite.measure.machine import (
    HARDWARE_KEYS,
    FingerprintFieldError,
    MachineFingerprint,
    default_profile_name,
    match,
    parse_build_info,
    parse_cpuinfo,
    read_caches,
)
from perfsuite.tools import cli

# Two AMD EPYC generations behind a hypervisor that shows the same short model name for both.
EPYC_FAMILY_25 = """\
processor	: 0
vendor_id	: AuthenticAMD
cpu family	: 25
model		: 1
model name	: AMD EPYC
stepping	: 1
flags		: fpu vme sse sse2 ssse3 fma sse4_1 sse4_2 avx f16c hypervisor avx2 bmi2 sha_ni

processor	: 1
vendor_id	: AuthenticAMD
cpu family	: 25
model		: 1
model name	: AMD EPYC
stepping	: 1
flags		: fpu vme sse sse2 ssse3 fma sse4_1 sse4_2 avx f16c hypervisor avx2 bmi2 sha_ni
"""
EPYC_FAMILY_26 = """\
processor	: 0
vendor_id	: AuthenticAMD
cpu family	: 26
model		: 2
model name	: AMD EPYC
stepping	: 1
flags		: fpu sse sse2 ssse3 fma sse4_1 sse4_2 avx f16c hypervisor avx2 avx512f avx512dq avx512ifma \
avx512cd avx512bw avx512vl avx_vnni avx512_bf16 avx512vbmi avx512_vbmi2 avx512_vnni

"""
GRAVITON3 = """\
processor	: 0
BogoMIPS	: 2100.00
Features	: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm jscvt fcma \
lrcpc dcpop sha3 sm3 sm4 asimddp sha512 sve asimdfhm dit uscat ilrcpc flagm ssbs paca pacg dcpodp svei8mm \
svebf16 i8mm bf16 dgh rng
CPU implementer	: 0x41
CPU architecture: 8
CPU variant	: 0x1
CPU part	: 0xd40
CPU revision	: 1
"""


def fingerprint_of(cpuinfo: str, **changes) -> MachineFingerprint:
    """A whole fingerprint around a parsed cpuinfo, the rest fixed (the same software, no GPU)."""
    cpu = parse_cpuinfo(cpuinfo)
    base = MachineFingerprint(
        cpu_vendor=cpu.vendor, cpu_family=cpu.family, cpu_model_number=cpu.model_number,
        cpu_stepping=cpu.stepping, cpu_model_name=cpu.model_name, isa=cpu.isa, cores=2,
        l2_cache_kib=1024, l3_cache_kib=32768, memory_gib=15.6, tensorflow="2.21.0",
        tensorflow_cuda="12.5.1", tensorflow_cudnn="9", onednn=True, gpu_model=None, gpu_driver=None,
        gpu_cuda_driver=None, gpu_power_limit_w=None,
    )
    return dataclasses.replace(base, **changes)


def sysfs(root: Path, caches) -> Path:
    """A sysfs tree with cpu0's cache directories: (level, type, size) per index."""
    for i, (level, kind, size) in enumerate(caches):
        index = root / "devices/system/cpu/cpu0/cache" / f"index{i}"
        index.mkdir(parents=True)
        (index / "level").write_text(f"{level}\n")
        (index / "type").write_text(f"{kind}\n")
        (index / "size").write_text(f"{size}\n")
    return root


# --------------------------------------------------------------------------------------------------
# Parsing


def test_x86_cpuinfo_gives_identity_and_only_the_kernel_relevant_flags():
    cpu = parse_cpuinfo(EPYC_FAMILY_26)
    assert (cpu.vendor, cpu.family, cpu.model_number, cpu.stepping, cpu.model_name) == ("AMD", 26, 2, 1, "AMD EPYC")
    assert "avx512f" in cpu.isa and "avx512_bf16" in cpu.isa and "avx2" in cpu.isa
    assert set(cpu.isa) <= set(machine.X86_FEATURES)  # no "hypervisor", "sha_ni": not kernel dispatch
    assert list(cpu.isa) == sorted(cpu.isa)


def test_only_the_first_processor_block_is_read():
    first_older_then_newer = EPYC_FAMILY_25.split("\n\n")[0] + "\n\n" + EPYC_FAMILY_26
    assert parse_cpuinfo(first_older_then_newer) == parse_cpuinfo(EPYC_FAMILY_25)
    assert parse_cpuinfo("\n\n" + EPYC_FAMILY_25) == parse_cpuinfo(EPYC_FAMILY_25)


def test_arm_cpuinfo():
    cpu = parse_cpuinfo(GRAVITON3)
    assert (cpu.vendor, cpu.family, cpu.model_number) == ("ARM", 8, 0xD40)
    assert cpu.stepping == 0x1 * 16 + 1  # r1p1
    assert cpu.model_name is None  # ARM kernels print none; never invented
    assert {"asimd", "sve", "bf16", "i8mm", "svebf16"} <= set(cpu.isa) <= set(machine.ARM_FEATURES)
    assert "aes" not in cpu.isa


@pytest.mark.parametrize("text", ["", "processor\t: 0\ncpu\t\t: POWER9\n", "garbage without colons\n"])
def test_unknown_cpuinfo_gives_nones_not_an_error(text):
    cpu = parse_cpuinfo(text)
    assert (cpu.vendor, cpu.family, cpu.model_number, cpu.stepping, cpu.isa) == (None, None, None, None, ())


def test_caches_from_sysfs(tmp_path):
    root = sysfs(tmp_path, [(1, "Data", "48K"), (1, "Instruction", "32K"), (2, "Unified", "1024K"),
                            (3, "Unified", "32M")])
    assert read_caches(root) == (1024, 32768)


def test_instruction_caches_and_missing_levels_are_not_taken(tmp_path):
    root = sysfs(tmp_path, [(1, "Data", "64K"), (2, "Instruction", "512K")])
    assert read_caches(root) == (None, None)


def test_missing_sysfs_gives_nones(tmp_path):
    assert read_caches(tmp_path / "no-such-sys") == (None, None)


def test_memory_from_meminfo():
    assert machine.parse_memory_gib("MemTotal:       16384000 kB\nMemFree: 1 kB\n") == 15.6
    assert machine.parse_memory_gib("") is None


def test_build_info_is_read_without_running_it():
    text = textwrap.dedent("""\
        import collections
        build_info = collections.OrderedDict([('cuda_version', '12.5.1'), ('cudnn_version', '9'),
                                              ('is_cuda_build', True)])
    """)
    assert parse_build_info(text) == {"cuda_version": "12.5.1", "cudnn_version": "9", "is_cuda_build": True}
    assert parse_build_info("build_info = {'is_cuda_build': False}\n") == {"is_cuda_build": False}
    assert parse_build_info("build_info = compute()\n") == {}
    assert parse_build_info("not python (") == {}


def test_tensorflow_build_comes_from_an_imported_tensorflow(monkeypatch):
    fake = types.SimpleNamespace(__version__="2.21.3",
                                 sysconfig=types.SimpleNamespace(get_build_info=lambda: {"is_cuda_build": False}))
    monkeypatch.setitem(sys.modules, "tensorflow", fake)
    assert machine._tensorflow_version() == "2.21.3"
    assert machine._tensorflow_build() == (None, None)  # a CPU-only build has no CUDA part


@pytest.mark.parametrize(("value", "enabled"), [(None, True), ("1", True), ("0", False), ("false", False),
                                                ("False ", False), ("yes", True)])
def test_onednn_follows_tensorflows_environment_rule(value, enabled):
    assert machine.onednn_enabled({} if value is None else {"TF_ENABLE_ONEDNN_OPTS": value}) is enabled


# --------------------------------------------------------------------------------------------------
# This machine, and machines without the sources


def test_fingerprint_from_fixture_roots(tmp_path, monkeypatch):
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "cpuinfo").write_text(EPYC_FAMILY_25)
    (proc / "meminfo").write_text("MemTotal: 8388608 kB\n")
    root = sysfs(tmp_path / "sys", [(2, "Unified", "512K"), (3, "Unified", "16384K")])
    monkeypatch.setattr(machine, "_gpu_identity", lambda: GpuIdentity("NVIDIA H200", "550.54.15", "12.4", 700))
    found = machine.machine_fingerprint(proc_root=proc, sys_root=root, environ={"TF_ENABLE_ONEDNN_OPTS": "0"})
    assert (found.cpu_vendor, found.cpu_family, found.cpu_model_number) == ("AMD", 25, 1)
    assert (found.l2_cache_kib, found.l3_cache_kib, found.memory_gib) == (512, 16384, 8.0)
    assert found.onednn is False
    assert (found.gpu_model, found.gpu_driver, found.gpu_cuda_driver, found.gpu_power_limit_w) == (
        "NVIDIA H200", "550.54.15", "12.4", 700)


def test_no_proc_no_sys_no_gpu_degrades_to_nones(tmp_path, monkeypatch):
    monkeypatch.setattr(machine, "_gpu_identity", lambda: None)
    found = machine.machine_fingerprint(proc_root=tmp_path / "none", sys_root=tmp_path / "none", environ={})
    assert found.cpu_vendor is found.cpu_family is found.cpu_model_number is found.l2_cache_kib is None
    assert found.memory_gib is None and found.isa == () and found.gpu_model is None
    assert found.cores >= 1
    assert MachineFingerprint.from_dict(found.as_dict()) == found  # still a valid profile fingerprint
    assert match(found, found)


def test_this_machine():
    found = machine.machine_fingerprint()
    assert found.cores == len(os.sched_getaffinity(0))
    assert MachineFingerprint.from_dict(yaml.safe_load(yaml.safe_dump(found.as_dict()))) == found


def test_taking_a_fingerprint_does_not_import_tensorflow():
    code = ("import sys; from perfsuite.measure.machine import machine_fingerprint; machine_fingerprint(); "
            "sys.exit('tensorflow' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], timeout=120, check=False).returncode == 0


def test_machine_module_imports_no_higher_layer():
    tree = ast.parse(Path(machine.__file__).read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    ours = {name for name in imported if name and name.startswith("perfsuite")}
    assert ours <= {"perfsuite.measure.gpu", "perfsuite.errors", "perfsuite.records"}  # records: a shared root module


# --------------------------------------------------------------------------------------------------
# Matching


def test_two_epyc_generations_with_the_same_model_name_do_not_match():
    older, newer = fingerprint_of(EPYC_FAMILY_25), fingerprint_of(EPYC_FAMILY_26)
    assert older.cpu_model_name == newer.cpu_model_name == "AMD EPYC"
    result = match(older, newer)
    assert not result
    assert set(result.keys) == {"cpu_family", "cpu_model_number", "isa"}
    assert "cpu_family: profile has 25, this machine has 26" in result.reasons
    (isa,) = [reason for reason in result.reasons if reason.startswith("isa:")]
    assert "only this machine has [" in isa and "avx512f" in isa


INFORMATIONAL = {"cpu_model_name", "memory_gib", "tensorflow_cudnn", "gpu_cuda_driver"}


def test_hardware_keys_are_fields_and_the_rest_is_informational():
    names = [f.name for f in dataclasses.fields(MachineFingerprint)]
    assert set(HARDWARE_KEYS) <= set(names) and len(set(HARDWARE_KEYS)) == len(HARDWARE_KEYS)
    assert set(names) - set(HARDWARE_KEYS) == INFORMATIONAL


@given(memory=st.one_of(st.none(), st.floats(min_value=0.5, max_value=4096)),
       name=st.one_of(st.none(), st.text(min_size=1)),
       cudnn=st.one_of(st.none(), st.sampled_from(["8", "9", "9.1.0"])),
       cuda_driver=st.one_of(st.none(), st.sampled_from(["12.2", "12.4"])))
def test_same_hardware_matches_whatever_the_informational_keys(memory, name, cudnn, cuda_driver):
    recorded = fingerprint_of(EPYC_FAMILY_26)
    current = dataclasses.replace(recorded, memory_gib=memory, cpu_model_name=name, tensorflow_cudnn=cudnn,
                                  gpu_cuda_driver=cuda_driver)
    assert match(recorded, current) and match(current, recorded)


CHANGED = {  # one value per hardware key that differs from fingerprint_of(EPYC_FAMILY_26)'s
    "cpu_vendor": "Intel", "cpu_family": 25, "cpu_model_number": 17, "cpu_stepping": 0,
    "isa": ("avx", "avx2", "f16c", "fma", "sse4_2"), "cores": 4, "l2_cache_kib": 512, "l3_cache_kib": None,
    "tensorflow": "2.20.0", "tensorflow_cuda": "12.3.2", "onednn": False, "gpu_model": "NVIDIA H200",
    "gpu_driver": "550.54.15", "gpu_power_limit_w": 600,
}


@given(keys=st.sets(st.sampled_from(HARDWARE_KEYS), min_size=1))
def test_any_hardware_difference_is_named_with_both_values(keys):
    recorded = fingerprint_of(EPYC_FAMILY_26)
    current = dataclasses.replace(recorded, **{key: CHANGED[key] for key in keys})
    result = match(recorded, current)
    assert not result and set(result.keys) == keys
    for difference in result.differences:
        assert (difference.recorded, difference.current) == (getattr(recorded, difference.key), CHANGED[difference.key])
        assert str(difference).startswith(f"{difference.key}: ")


@pytest.mark.parametrize(("key", "recorded", "current"), [
    ("tensorflow", "2.21.0", "2.21.4"), ("tensorflow_cuda", "12.5.1", "12.5.0"),
    ("gpu_driver", "550.54.15", "550.90.07"), ("isa", ("avx2", "fma"), ("fma", "avx2")),
])
def test_versions_compare_at_the_stated_precision(key, recorded, current):
    base = fingerprint_of(EPYC_FAMILY_26)
    assert match(dataclasses.replace(base, **{key: recorded}), dataclasses.replace(base, **{key: current}))


def test_default_profile_names_identify_the_hardware():
    assert default_profile_name(fingerprint_of(EPYC_FAMILY_26)) == "cpu-amd-fam26-model2-2core"
    assert default_profile_name(fingerprint_of(EPYC_FAMILY_25)) != default_profile_name(fingerprint_of(EPYC_FAMILY_26))
    gpu = fingerprint_of(EPYC_FAMILY_25, cores=16, gpu_model="NVIDIA H200", gpu_driver="550.54.15")
    assert default_profile_name(gpu) == "gpu-nvidia-h200-amd-fam25-model1-16core"
    assert default_profile_name(fingerprint_of("", cores=4)) == "cpu-unknown-4core"


# --------------------------------------------------------------------------------------------------
# The dict form (what profile files hold)


@given(cpuinfo=st.sampled_from([EPYC_FAMILY_25, EPYC_FAMILY_26, GRAVITON3, ""]),
       cores=st.integers(min_value=1, max_value=512), memory=st.one_of(st.none(), st.floats(0, 1e4)))
def test_dict_round_trip_through_yaml(cpuinfo, cores, memory):
    original = fingerprint_of(cpuinfo, cores=cores, memory_gib=memory)
    document = yaml.safe_load(yaml.safe_dump(original.as_dict()))
    assert MachineFingerprint.from_dict(document) == original


@pytest.mark.parametrize(("change", "key", "message"), [
    (lambda d: d.pop("isa"), "isa", "isa: missing (required key)"),
    (lambda d: d.update(cpu_model="AMD EPYC"), "cpu_model", "cpu_model: unknown key; expected one of cpu_vendor"),
    (lambda d: d.update(tensorflow=2.2), "tensorflow", "tensorflow: expected a string or null (quote numbers"),
    (lambda d: d.update(cores=0), "cores", "cores: expected a positive integer, found 0"),
    (lambda d: d.update(cpu_family="25"), "cpu_family", "expected a non-negative integer or null, found '25'"),
    (lambda d: d.update(onednn="yes"), "onednn", "onednn: expected true or false, found 'yes'"),
    (lambda d: d.update(cpu_family=True), "cpu_family", "found True"),
    (lambda d: d.update(isa="avx2"), "isa", "isa: expected a list of feature names"),
], ids=["missing", "unknown", "tf-float", "no-cores", "family-str", "onednn-str", "family-bool", "isa-str"])
def test_from_dict_names_the_wrong_key(change, key, message):
    document = fingerprint_of(EPYC_FAMILY_26).as_dict()
    change(document)
    with pytest.raises(FingerprintFieldError) as error:
        MachineFingerprint.from_dict(document)
    assert error.value.key == key and message in str(error.value)


# --------------------------------------------------------------------------------------------------
# perfsuite machine


def run_machine(capfd, *args):
    code = cli.main(["machine", *map(str, args)])
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def profile_file(directory: Path, name: str, fingerprint: MachineFingerprint) -> Path:
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"format": 2, "profile": name, "fingerprint": fingerprint.as_dict(),
                                    "benchmarks": {}}, sort_keys=False))
    return path


@pytest.fixture
def this_machine(monkeypatch):
    here = fingerprint_of(EPYC_FAMILY_26)
    monkeypatch.setattr(machine, "machine_fingerprint", lambda: here)
    return here


def test_machine_prints_every_key_and_each_profiles_verdict(capfd, tmp_path, this_machine):
    profile_file(tmp_path, "cpu-amd-fam26-model2-2core", this_machine)
    profile_file(tmp_path, "cpu-amd-fam25-model1-2core", fingerprint_of(EPYC_FAMILY_25))
    (tmp_path / "cpu-2core.yaml").write_text("profile: cpu-2core\nfingerprint: {cpu_model: AMD EPYC, cpu_count: 2}\n"
                                             "benchmarks: {}\n")
    (tmp_path / "ratios.yaml").write_text("ratios: {}\n")  # not a profile: not listed
    code, out, err = run_machine(capfd, "--baselines", tmp_path)
    assert code == 0 and err == ""
    lines = out.splitlines()
    for key in this_machine.as_dict():
        assert sum(line.startswith(f"{key}: ") for line in lines) == 1
    assert f"cores: {this_machine.cores}" in lines and "gpu_model: null" in lines
    assert "profile name: cpu-amd-fam26-model2-2core" in lines
    verdicts = {line.split(": ", 1)[0]: line.split(": ", 1)[1] for line in lines if line.startswith(str(tmp_path))}
    assert set(verdicts) == {str(tmp_path / n) for n in
                             ("cpu-amd-fam26-model2-2core.yaml", "cpu-amd-fam25-model1-2core.yaml", "cpu-2core.yaml")}
    assert verdicts[str(tmp_path / "cpu-amd-fam26-model2-2core.yaml")] == "matches"
    assert verdicts[str(tmp_path / "cpu-amd-fam25-model1-2core.yaml")].startswith(
        "differs: cpu_family: profile has 25, this machine has 26; cpu_model_number: profile has 1, ")
    assert verdicts[str(tmp_path / "cpu-2core.yaml")].startswith("not applicable: recorded in format 1")
    assert "to record one" not in out  # one matched


def test_machine_without_a_matching_profile_says_how_to_record_one(capfd, tmp_path, this_machine):
    profile_file(tmp_path, "cpu-amd-fam25-model1-2core", fingerprint_of(EPYC_FAMILY_25))
    code, out, _ = run_machine(capfd, "--baselines", tmp_path)
    assert code == 0
    assert out.splitlines()[-1] == (f"no profile in {tmp_path} matches this machine; to record one: pytest "
                                    f"benchmarks/ --perfsuite-baselines {tmp_path} --perfsuite-save-baselines "
                                    "--perfsuite-gates=report")


def test_machine_default_directory_is_relative_to_the_current_one(capfd, tmp_path, monkeypatch, this_machine):
    monkeypatch.chdir(tmp_path)
    code, out, _ = run_machine(capfd)
    assert code == 0 and "no baselines directory at benchmarks/baselines" in out
    (tmp_path / "benchmarks" / "baselines").mkdir(parents=True)
    profile_file(tmp_path / "benchmarks" / "baselines", "here", this_machine)
    code, out, _ = run_machine(capfd)
    assert code == 0 and "benchmarks/baselines/here.yaml: matches" in out.splitlines()


@pytest.mark.parametrize(("text", "key"), [
    ("format: 2\nprofile: bad\nfingerprint: {cpu_vendor: AMD}\nbenchmarks: {}\n", "fingerprint.cpu_family"),
    ("format: 3\nprofile: bad\n", "format"),
    ("profile: [unclosed\n", "line 2, column 1"),
])
def test_machine_malformed_profile_is_one_line_naming_the_file(capfd, tmp_path, this_machine, text, key):
    (tmp_path / "bad.yaml").write_text(text)
    code, _, err = run_machine(capfd, "--baselines", tmp_path)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith(f"error: {tmp_path / 'bad.yaml'}: {key}")


def test_machine_several_matching_profiles_is_an_error(capfd, tmp_path, this_machine):
    profile_file(tmp_path, "one", this_machine)
    profile_file(tmp_path, "two", dataclasses.replace(this_machine, memory_gib=1.0))
    code, out, err = run_machine(capfd, "--baselines", tmp_path)
    assert code == 2 and "expected one matching profile, found several" in err
    assert out.count(": matches") == 2


def test_machine_missing_baselines_directory_is_a_usage_error(capfd, tmp_path):
    code, _, err = run_machine(capfd, "--baselines", tmp_path / "nope")
    assert code == 2 and "--baselines: expected a baselines directory, found nothing at that path" in err

//! The LLVM backend from a user's point of view: which backend a program gets, what happens with a
//! broken or missing libLLVM, and the disk kernel cache across processes.
//!
//! Backend choice and cache folder are read once per process, so most checks run this test binary
//! again as a child process (`child_*` tests do their work only when `KILN_TEST_CHILD` names them;
//! in a normal run they return at once) with the environment under test, and read its output.
//! Where this machine has no libLLVM, the checks that need one say so and skip.

use kiln::prelude::*;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Output of this test binary run as `child` with `envs`.
struct Child {
    ok: bool,
    stdout: String,
    stderr: String,
}

fn run_child(child: &str, envs: &[(&str, &str)]) -> Child {
    let mut cmd = Command::new(std::env::current_exe().expect("test binary path"));
    cmd.args([child, "--exact", "--nocapture", "--test-threads=1"])
        .env("KILN_TEST_CHILD", child)
        .env_remove("KILN_BACKEND")
        .env_remove("KILN_LLVM_PATH")
        .env_remove("KILN_DISK_CACHE")
        .env_remove("KILN_CACHE_DIR")
        .env("KILN_LOG", "warn");
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run the test binary as a child");
    Child {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn is_child(name: &str) -> bool {
    std::env::var("KILN_TEST_CHILD").as_deref() == Ok(name)
}

/// A fresh folder under the temp dir.
fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "kiln-llvm-test-{tag}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn llvm_here() -> bool {
    match kiln_core::backend::llvm::shared() {
        Ok(_) => true,
        Err(reason) => {
            eprintln!("SKIPPED (no usable libLLVM on this machine): {reason}");
            false
        }
    }
}

/// Work whose kernels are particular to this file (so the cache counts are this work's), printed
/// with the stats as `key=value` lines.
fn child_work() {
    let x = Float32::linspace(-2.0, 2.0, 10_001);
    let y = (&x * &x + 0.371).tanh() * (-&x).exp() + x.abs().sqrt();
    // a fallible read: an unavailable backend is an error value, not a panic
    let v = y
        .try_to_vec()
        .map(|v| v.iter().map(|&e| e as f64).sum::<f64>());
    let s = kiln::stats();
    match v {
        Ok(v) => println!("value={v}"),
        Err(e) => println!("error={e}"),
    }
    println!("backend={}", kiln::backend());
    println!(
        "disk_hits={} cache_misses={} compiled={}",
        s.disk_hits, s.cache_misses, s.kernels_compiled
    );
}

fn field<'a>(out: &'a str, key: &str) -> Option<&'a str> {
    let k = format!("{key}=");
    out.split_whitespace()
        .find_map(|w| w.strip_prefix(k.as_str()))
}

#[test]
fn child_runs_work() {
    if is_child("child_runs_work") {
        child_work();
    }
}

#[test]
fn the_default_backend_is_llvm_where_it_is_installed() {
    let c = run_child("child_runs_work", &[("KILN_DISK_CACHE", "0")]);
    assert!(c.ok, "{}{}", c.stdout, c.stderr);
    let want = if llvm_here() { "llvm" } else { "cranelift" };
    assert_eq!(field(&c.stdout, "backend"), Some(want), "{}", c.stdout);
    // and the value is the same as the interpreter's, to the last bits
    let i = run_child(
        "child_runs_work",
        &[("KILN_BACKEND", "interp"), ("KILN_DISK_CACHE", "0")],
    );
    let (a, b) = (field(&c.stdout, "value"), field(&i.stdout, "value"));
    // elementwise work, summed on the host in one order: the same bits from every backend
    assert_eq!(a, b, "{} vs interp {}", c.stdout, i.stdout);
}

#[test]
fn a_fake_library_falls_back_to_cranelift_naming_the_library_and_symbol() {
    // a real shared library that is not LLVM: the first missing function is named
    let Some(libc) = [
        "/lib/x86_64-linux-gnu/libc.so.6",
        "/usr/lib/x86_64-linux-gnu/libc.so.6",
    ]
    .into_iter()
    .find(|p| Path::new(p).exists()) else {
        eprintln!("SKIPPED: no libc.so.6 at the usual paths to use as a fake libLLVM");
        return;
    };
    let c = run_child(
        "child_runs_work",
        &[("KILN_LLVM_PATH", libc), ("KILN_DISK_CACHE", "0")],
    );
    assert!(c.ok, "{}{}", c.stdout, c.stderr);
    assert_eq!(field(&c.stdout, "backend"), Some("cranelift"));
    assert!(field(&c.stdout, "value").is_some(), "{}", c.stdout);
    assert!(
        c.stderr.contains("libc.so.6") && c.stderr.contains("LLVMContextCreate"),
        "the warning names the library and the missing symbol:\n{}",
        c.stderr
    );
    // a file that is not a library at all
    let d = temp_dir("fake");
    let fake = d.join("libLLVM-fake.so");
    std::fs::write(&fake, b"definitely not ELF").unwrap();
    let c = run_child(
        "child_runs_work",
        &[
            ("KILN_LLVM_PATH", fake.to_str().unwrap()),
            ("KILN_DISK_CACHE", "0"),
        ],
    );
    assert_eq!(field(&c.stdout, "backend"), Some("cranelift"));
    assert!(
        c.stderr.contains("libLLVM-fake.so"),
        "the warning names the library:\n{}",
        c.stderr
    );
    std::fs::remove_dir_all(&d).ok();
}

#[test]
fn an_old_llvm_is_not_used() {
    let c = run_child(
        "child_runs_work",
        &[
            ("KILN_LLVM_PATH", "/usr/lib/llvm-14/lib/libLLVM-14.so"),
            ("KILN_DISK_CACHE", "0"),
        ],
    );
    assert!(c.ok, "{}{}", c.stdout, c.stderr);
    assert_eq!(field(&c.stdout, "backend"), Some("cranelift"));
    assert!(
        c.stderr.contains("LLVM 14") && c.stderr.contains("≥ 15"),
        "{}",
        c.stderr
    );
}

#[test]
fn asking_for_llvm_where_it_is_missing_is_a_clear_error() {
    let c = run_child(
        "child_runs_work",
        &[
            ("KILN_BACKEND", "llvm"),
            ("KILN_LLVM_PATH", "/nonexistent/libLLVM-99.so"),
            ("KILN_DISK_CACHE", "0"),
        ],
    );
    assert!(c.ok, "{}{}", c.stdout, c.stderr);
    let err = c
        .stdout
        .lines()
        .find_map(|l| l.find("error=").map(|i| &l[i + 6..]))
        .unwrap_or_else(|| panic!("expected an error, got:\n{}", c.stdout));
    assert!(
        err.contains("llvm") && err.contains("libLLVM-99.so") && err.contains("KILN_LLVM_PATH"),
        "{err}"
    );
}

#[test]
fn a_second_process_loads_kernels_from_the_disk_cache() {
    if !llvm_here() {
        return;
    }
    let d = temp_dir("disk");
    let dir = d.to_str().unwrap();
    let first = run_child("child_runs_work", &[("KILN_CACHE_DIR", dir)]);
    assert!(first.ok, "{}{}", first.stdout, first.stderr);
    assert_eq!(
        field(&first.stdout, "disk_hits"),
        Some("0"),
        "{}",
        first.stdout
    );
    let compiled: u64 = field(&first.stdout, "compiled").unwrap().parse().unwrap();
    assert!(compiled >= 1);
    let files = std::fs::read_dir(&d)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().extension() == Some("kobj".as_ref()))
        .count();
    assert_eq!(files as u64, compiled, "one file per compiled kernel");

    let second = run_child("child_runs_work", &[("KILN_CACHE_DIR", dir)]);
    assert!(second.ok, "{}{}", second.stdout, second.stderr);
    assert_eq!(
        field(&second.stdout, "compiled"),
        Some("0"),
        "{}",
        second.stdout
    );
    assert_eq!(
        field(&second.stdout, "disk_hits").map(|s| s.parse::<u64>().unwrap()),
        Some(compiled)
    );
    assert_eq!(
        field(&first.stdout, "value"),
        field(&second.stdout, "value")
    );

    // corrupt every cached file in a different way: each is ignored and recompiled, never a crash
    let objects = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension() == Some("kobj".as_ref()));
    for (i, p) in objects.enumerate() {
        let mut bytes = std::fs::read(&p).unwrap();
        match i % 3 {
            0 => bytes.truncate(bytes.len() / 2),
            1 => {
                let n = bytes.len();
                bytes[n - 10] ^= 0x55;
            }
            _ => bytes = b"KILNKOBJ but nothing else".to_vec(),
        }
        std::fs::write(&p, bytes).unwrap();
    }
    let third = run_child("child_runs_work", &[("KILN_CACHE_DIR", dir)]);
    assert!(third.ok, "{}{}", third.stdout, third.stderr);
    assert_eq!(
        field(&third.stdout, "disk_hits"),
        Some("0"),
        "{}",
        third.stdout
    );
    assert_eq!(
        field(&third.stdout, "compiled").map(|s| s.parse::<u64>().unwrap()),
        Some(compiled)
    );
    assert_eq!(field(&first.stdout, "value"), field(&third.stdout, "value"));
    // and the recompiled objects replaced the bad files
    let fourth = run_child("child_runs_work", &[("KILN_CACHE_DIR", dir)]);
    assert_eq!(
        field(&fourth.stdout, "compiled"),
        Some("0"),
        "{}",
        fourth.stdout
    );
    std::fs::remove_dir_all(&d).ok();
}

#[test]
fn an_unwritable_cache_folder_warns_once_and_the_program_runs() {
    if !llvm_here() {
        return;
    }
    let d = temp_dir("unwritable");
    let file = d.join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let bad = file.join("cache");
    let c = run_child(
        "child_runs_work",
        &[("KILN_CACHE_DIR", bad.to_str().unwrap())],
    );
    assert!(c.ok, "{}{}", c.stdout, c.stderr);
    assert!(field(&c.stdout, "value").is_some(), "{}", c.stdout);
    let warnings = c
        .stderr
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("kiln::cache"))
        .count();
    assert_eq!(warnings, 1, "{}", c.stderr);
    assert!(c.stderr.contains("KILN_CACHE_DIR"), "{}", c.stderr);
    std::fs::remove_dir_all(&d).ok();
}

#[test]
fn disabling_the_disk_cache_writes_nothing() {
    if !llvm_here() {
        return;
    }
    let d = temp_dir("off");
    let c = run_child(
        "child_runs_work",
        &[
            ("KILN_CACHE_DIR", d.to_str().unwrap()),
            ("KILN_DISK_CACHE", "0"),
        ],
    );
    assert!(c.ok, "{}{}", c.stdout, c.stderr);
    assert_eq!(std::fs::read_dir(&d).unwrap().count(), 0);
    std::fs::remove_dir_all(&d).ok();
}

//! On-disk kernel cache: compiled object code by (kernel hash, backend, target), one file each.
//!
//! A second run of a program should not pay for LLVM again, so a backend asks [`load`] before it
//! compiles and hands the result to [`store`] after. This module owns only the folder and the file
//! format; what the bytes mean is the backend's business. The cache is best effort by design: a
//! missing, corrupt, truncated or foreign file is a miss (logged at debug under `kiln::cache`), and
//! a folder that can't be written warns once and turns the disk cache off, because a cache must
//! never be the reason a program fails. Files are written to a temp name and renamed into place,
//! so concurrent processes sharing the folder see either the old file, the new one, or none.

use crate::kernel::KernelHash;
use std::ffi::OsString;
use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;

/// What identifies one cached object. All fields must match for a hit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Key<'a> {
    /// 128-bit hash of the kernel IR.
    pub kernel: KernelHash,
    /// Backend name, e.g. `"llvm"`.
    pub backend: &'a str,
    /// CPU name + feature string + backend version: anything that changes the object code.
    pub target: &'a str,
}

/// First bytes of every cache file, so a stray file is recognised as foreign at once.
pub const MAGIC: &[u8; 8] = b"KILNKOBJ";
/// Version of the layout below; bump it when the layout changes (old files then simply miss).
pub const FORMAT_VERSION: u32 = 1;
/// Largest payload [`store_in`] accepts. Kernels are far smaller; this only bounds what `load`
/// will read into memory from a file that claims to be ours.
pub const MAX_PAYLOAD: usize = 256 << 20;
/// Extension of cache files (temp files end in `.tmp` instead, so they never load).
const EXT: &str = "kobj";
/// kiln's own version: object code from another kiln may assume another calling convention.
const KILN_VERSION: &str = env!("CARGO_PKG_VERSION");
/// Default size limit of the cache folder (`KILN_CACHE_MAX_MB` overrides it). Past it, the least
/// recently used files are removed down to 80% of the limit, so the folder never grows without
/// bound (test suites and programs with many one-off kernels would otherwise fill it).
pub const DEFAULT_MAX_BYTES: u64 = 512 << 20;
/// A process considers trimming at its first store and then every this many stores...
const TRIM_EVERY: u64 = 256;
/// ...and trims only if no process has done so for this long (listing a full folder costs
/// ~0.1 s, too much for every process's first compile). The time is a stamp file's.
const TRIM_INTERVAL: std::time::Duration = std::time::Duration::from_secs(600);
const TRIM_STAMP: &str = ".trim-stamp";

/// Trim `dir` unless its stamp says a trim ran less than `TRIM_INTERVAL` ago; refreshes the stamp
/// first, so concurrent processes do not all trim at once.
fn trim_if_due(dir: &Path, max_bytes: u64) {
    let stamp = dir.join(TRIM_STAMP);
    let recent = fs::metadata(&stamp)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .is_some_and(|age| age < TRIM_INTERVAL);
    if recent {
        return;
    }
    if fs::write(&stamp, b"").is_ok() {
        let _ = trim(dir, max_bytes);
    }
}
/// The sanitised backend name in a file name is cut to this; the file's content has it in full.
const BACKEND_NAME_MAX: usize = 32;

/// The cached bytes for `key`, or `None`: disabled, missing, or a file that is corrupt, truncated
/// or foreign (wrong magic, format, version, key or checksum). Such files are ignored, never an
/// error. Uses [`dir()`].
pub fn load(key: &Key) -> Option<Vec<u8>> {
    global().load(key)
}

/// Store `bytes` for `key`, best effort: never panics, never fails the caller.
///
/// If the folder can't be created or written, warns once per process (naming the folder, the OS
/// error and the fix) and disables the disk cache for the rest of the process.
pub fn store(key: &Key, bytes: &[u8]) {
    global().store(key, bytes);
}

/// The resolved cache folder, or `None` when the disk cache is disabled.
///
/// Resolved once per process: `KILN_DISK_CACHE=0` (or `false`/`off`) → `None`; else
/// `KILN_CACHE_DIR` if set and non-empty; else `$XDG_CACHE_HOME/kiln` if `XDG_CACHE_HOME` is set,
/// non-empty and absolute; else `$HOME/.cache/kiln`; else `None`. Also `None` once a failed
/// [`store`] has disabled the cache.
pub fn dir() -> Option<PathBuf> {
    global().dir().map(Path::to_path_buf)
}

/// Path of the file for `key` inside `dir`:
/// `{kernel hash}-{backend}-{xxh3_64(target + "\0" + kiln version)}.kobj`.
///
/// The backend is reduced to `[A-Za-z0-9_]` so the name is safe on every file system; the file's
/// content still holds the exact key, so names that collide after sanitising only ever miss.
pub fn file_path(dir: &Path, key: &Key) -> PathBuf {
    let backend: String = key
        .backend
        .chars()
        .take(BACKEND_NAME_MAX)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let mut t = Vec::with_capacity(key.target.len() + 1 + KILN_VERSION.len());
    t.extend_from_slice(key.target.as_bytes());
    t.push(0);
    t.extend_from_slice(KILN_VERSION.as_bytes());
    let target = xxhash_rust::xxh3::xxh3_64(&t);
    dir.join(format!("{}-{backend}-{target:016x}.{EXT}", key.kernel))
}

/// The cached bytes for `key` in `dir`, or `None` if the file is missing, unreadable, or fails any
/// check (magic, format version, kiln version, backend, target, kernel hash, exact length,
/// checksum).
///
/// ```
/// use kiln_core::diskcache::{load_from, store_in, Key};
/// use kiln_core::kernel::KernelHash;
/// let dir = std::env::temp_dir().join(format!("kiln-doctest-load-{}", std::process::id()));
/// let key = Key { kernel: KernelHash(7), backend: "llvm", target: "znver4 +avx512f llvm-20" };
/// assert_eq!(load_from(&dir, &key), None); // nothing there yet
/// store_in(&dir, &key, b"object code")?;
/// assert_eq!(load_from(&dir, &key).as_deref(), Some(&b"object code"[..]));
/// let other = Key { target: "generic", ..key };
/// assert_eq!(load_from(&dir, &other), None);
/// std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn load_from(dir: &Path, key: &Key) -> Option<Vec<u8>> {
    let path = file_path(dir, key);
    match read_checked(&path, key) {
        Ok(bytes) => {
            // a hit is a use: `trim` removes the least recently used files first
            let _ = fs::File::options()
                .append(true)
                .open(&path)
                .and_then(|f| f.set_modified(std::time::SystemTime::now()));
            Some(bytes)
        }
        Err(Miss::Absent) => None,
        Err(Miss::Io(e)) => {
            tracing::debug!(target: "kiln::cache", "disk cache: can't read {}: {e}", path.display());
            None
        }
        Err(Miss::Rejected(why)) => {
            tracing::debug!(target: "kiln::cache", "disk cache: ignoring {}: {why}", path.display());
            None
        }
    }
}

/// Write `bytes` for `key` into `dir` (created if needed), atomically: a temp file in the same
/// folder, then a rename over the final name. Errors if the folder can't be created or written,
/// or if the payload exceeds [`MAX_PAYLOAD`].
///
/// ```
/// use kiln_core::diskcache::{file_path, load_from, store_in, Key};
/// use kiln_core::kernel::KernelHash;
/// let dir = std::env::temp_dir().join(format!("kiln-doctest-store-{}", std::process::id()));
/// let key = Key { kernel: KernelHash(0xfeed), backend: "llvm", target: "x86-64-v3" };
/// store_in(&dir, &key, b"first")?;
/// store_in(&dir, &key, b"second")?; // replaces the first
/// assert!(file_path(&dir, &key).is_file());
/// assert_eq!(load_from(&dir, &key).as_deref(), Some(&b"second"[..]));
/// std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn store_in(dir: &Path, key: &Key, bytes: &[u8]) -> io::Result<()> {
    check_storable(key, bytes)?;
    fs::create_dir_all(dir)?;
    let path = file_path(dir, key);
    let header = encode_header(key, KILN_VERSION, FORMAT_VERSION, bytes);
    let tmp = temp_path(&path);
    let written = (|| {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        f.write_all(&header)?;
        f.write_all(bytes)?;
        drop(f);
        fs::rename(&tmp, &path)
    })();
    if written.is_err() {
        // The temp file may or may not exist (create_new can fail); either way don't leave it.
        let _ = fs::remove_file(&tmp);
    }
    written
}

/// Keep `dir` under `max_bytes`: if its cache files add up to more, remove the least recently
/// used (oldest modification time; loads refresh it) until they fit in 80% of it. Other files are
/// left alone; files another process removes meanwhile are skipped. Returns the bytes removed.
///
/// ```
/// use kiln_core::diskcache::{store_in, trim, Key};
/// use kiln_core::kernel::KernelHash;
/// let dir = std::env::temp_dir().join(format!("kiln-doctest-trim-{}", std::process::id()));
/// for h in 0..4u128 {
///     store_in(&dir, &Key { kernel: KernelHash(h), backend: "llvm", target: "t" }, &[0; 1000])?;
/// }
/// assert!(trim(&dir, 2500)? > 0);
/// assert!(std::fs::read_dir(&dir)?.count() <= 2);
/// std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn trim(dir: &Path, max_bytes: u64) -> io::Result<u64> {
    let mut files = Vec::new();
    let mut total = 0u64;
    for entry in fs::read_dir(dir)? {
        let Ok(entry) = entry else { continue };
        let path = entry.path();
        if path.extension().and_then(|e| e.to_str()) != Some(EXT) {
            continue;
        }
        let Ok(meta) = entry.metadata() else { continue };
        let modified = meta.modified().unwrap_or(std::time::UNIX_EPOCH);
        total += meta.len();
        files.push((modified, meta.len(), path));
    }
    if total <= max_bytes {
        return Ok(0);
    }
    files.sort();
    let goal = max_bytes / 10 * 8;
    let mut removed = 0u64;
    for (_, len, path) in files {
        if total - removed <= goal {
            break;
        }
        if fs::remove_file(&path).is_ok() {
            removed += len;
        }
    }
    tracing::debug!(target: "kiln::cache", "disk cache: {} over its {} MB limit; removed {} KB of the least recently used kernels", dir.display(), max_bytes >> 20, removed >> 10);
    Ok(removed)
}

// ---------------------------------------------------------------------------------------------
// Process-wide state

/// The process's disk cache: the folder resolved once from the environment, and whether a failed
/// store has turned it off. A struct rather than bare statics so tests can drive the
/// warn-once-and-disable logic with an explicit folder.
struct Store {
    dir: Option<PathBuf>,
    disabled: AtomicBool,
    /// Size limit of the folder (see `trim`); 0 follows `config::cache_max_mb`.
    max_bytes: u64,
    /// Successful stores so far (trimming happens at the first and every `TRIM_EVERY`th).
    stores: AtomicU64,
}

/// What [`Store::store`] did; only tests look at it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Stored,
    /// Disabled (by the environment or an earlier failure): nothing attempted.
    Skipped,
    /// The payload or key can't be stored (too large); the cache stays on.
    Refused,
    /// Writing failed; this call warned and disabled the cache.
    FailedAndDisabled,
    /// Writing failed, but another call had already disabled the cache (and warned).
    Failed,
}

impl Store {
    fn new(dir: Option<PathBuf>) -> Store {
        Store {
            dir,
            disabled: AtomicBool::new(false),
            max_bytes: DEFAULT_MAX_BYTES,
            stores: AtomicU64::new(0),
        }
    }

    fn dir(&self) -> Option<&Path> {
        if self.disabled.load(Ordering::Relaxed) {
            return None;
        }
        self.dir.as_deref()
    }

    fn load(&self, key: &Key) -> Option<Vec<u8>> {
        load_from(self.dir()?, key)
    }

    fn store(&self, key: &Key, bytes: &[u8]) -> Outcome {
        let Some(dir) = self.dir() else {
            return Outcome::Skipped;
        };
        if let Err(e) = check_storable(key, bytes) {
            tracing::debug!(target: "kiln::cache", "disk cache: not storing kernel {}: {e}", key.kernel);
            return Outcome::Refused;
        }
        match store_in(dir, key, bytes) {
            Ok(()) => {
                if self.stores.fetch_add(1, Ordering::Relaxed) % TRIM_EVERY == 0 {
                    let max = match self.max_bytes {
                        0 => crate::config::cache_max_mb().saturating_mul(1 << 20),
                        m => m,
                    };
                    trim_if_due(dir, max);
                }
                Outcome::Stored
            }
            // swap: of several threads failing at once, exactly one warns
            Err(e) if !self.disabled.swap(true, Ordering::Relaxed) => {
                tracing::warn!(target: "kiln::cache", "{}", unwritable_message(dir, &e));
                Outcome::FailedAndDisabled
            }
            Err(_) => Outcome::Failed,
        }
    }
}

static STORE: OnceLock<Store> = OnceLock::new();

fn global() -> &'static Store {
    STORE.get_or_init(|| {
        // (the KILN_ variables through `config`, which reads each once; HOME and XDG_CACHE_HOME
        // directly)
        let dir = resolve(|name| {
            if name.starts_with("KILN_") {
                crate::config::env_os(name)
            } else {
                std::env::var_os(name)
            }
        });
        match &dir {
            Some(d) => tracing::debug!(target: "kiln::cache", "disk cache at {}", d.display()),
            None => tracing::debug!(target: "kiln::cache", "disk cache disabled"),
        }
        let mut store = Store::new(dir);
        // 0: the limit follows `config::cache_max_mb`, which a program may change at run time
        store.max_bytes = 0;
        store
    })
}

/// The cache folder from the environment, read through `var` so tests need not touch the real
/// (process-wide) environment. See [`dir()`] for the rules.
fn resolve(var: impl Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    let non_empty = |name: &str| var(name).filter(|v| !v.is_empty());
    if let Some(v) = non_empty("KILN_DISK_CACHE") {
        let v = v.to_string_lossy().trim().to_ascii_lowercase();
        if matches!(v.as_str(), "0" | "false" | "off") {
            return None;
        }
    }
    if let Some(d) = non_empty("KILN_CACHE_DIR") {
        return Some(PathBuf::from(d));
    }
    if let Some(x) = non_empty("XDG_CACHE_HOME").map(PathBuf::from) {
        if x.is_absolute() {
            return Some(x.join("kiln"));
        }
    }
    non_empty("HOME").map(|h| PathBuf::from(h).join(".cache").join("kiln"))
}

fn unwritable_message(dir: &Path, e: &io::Error) -> String {
    format!(
        "kiln: can't write the kernel disk cache in {}: {e}; the disk cache is off for this \
         process. Set KILN_CACHE_DIR to a writable folder, or KILN_DISK_CACHE=0 to silence this.",
        dir.display()
    )
}

// ---------------------------------------------------------------------------------------------
// File format
//
//   magic "KILNKOBJ" | u32 format version | (u32 len, bytes) kiln version, backend, target
//   | u128 kernel hash | u64 payload length | u64 xxh3_64(payload) | payload
//
// All integers little-endian. The key is repeated in full inside the file because the file name
// only carries hashes and a sanitised backend: a collision there must not become a wrong kernel.

fn check_storable(key: &Key, bytes: &[u8]) -> io::Result<()> {
    if bytes.len() > MAX_PAYLOAD {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "payload of {} bytes exceeds the disk cache's limit of {MAX_PAYLOAD}",
                bytes.len()
            ),
        ));
    }
    for s in [key.backend, key.target] {
        if u32::try_from(s.len()).is_err() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "disk cache key string longer than 4 GiB",
            ));
        }
    }
    Ok(())
}

fn header_len(key: &Key, version: &str) -> usize {
    MAGIC.len()
        + 4
        + (4 + version.len())
        + (4 + key.backend.len())
        + (4 + key.target.len())
        + 16
        + 8
        + 8
}

/// Everything before the payload. `version`/`format` are parameters so tests can forge files
/// from another kiln.
fn encode_header(key: &Key, version: &str, format: u32, payload: &[u8]) -> Vec<u8> {
    let mut h = Vec::with_capacity(header_len(key, version));
    h.extend_from_slice(MAGIC);
    h.extend_from_slice(&format.to_le_bytes());
    for s in [version, key.backend, key.target] {
        h.extend_from_slice(&(s.len() as u32).to_le_bytes());
        h.extend_from_slice(s.as_bytes());
    }
    h.extend_from_slice(&key.kernel.0.to_le_bytes());
    h.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    h.extend_from_slice(&xxhash_rust::xxh3::xxh3_64(payload).to_le_bytes());
    h
}

/// Why a load missed.
enum Miss {
    /// No file: the ordinary miss, not worth a log line.
    Absent,
    Io(io::Error),
    Rejected(String),
}

impl From<io::Error> for Miss {
    fn from(e: io::Error) -> Miss {
        if e.kind() == io::ErrorKind::NotFound {
            Miss::Absent
        } else {
            Miss::Io(e)
        }
    }
}

fn read_checked(path: &Path, key: &Key) -> Result<Vec<u8>, Miss> {
    let f = fs::File::open(path)?;
    let len = f.metadata()?.len();
    let header = header_len(key, KILN_VERSION) as u64;
    // The header's length follows from the key alone, so a file of the wrong size is rejected
    // before reading it, and a huge foreign file is never read into memory.
    if len < header || len - header > MAX_PAYLOAD as u64 {
        return Err(Miss::Rejected(format!(
            "size {len} can't hold this key's object"
        )));
    }
    let mut data = Vec::with_capacity(len as usize);
    // +1: a file that grew since `metadata` shows up as a length mismatch, not a silent cut
    f.take(len + 1).read_to_end(&mut data)?;
    let start = decode(&data, key).map_err(Miss::Rejected)?;
    data.drain(..start);
    Ok(data)
}

/// Check `data` against `key` and this kiln; returns the payload's offset.
fn decode(data: &[u8], key: &Key) -> Result<usize, String> {
    let mut r = Reader { data, pos: 0 };
    if r.take(MAGIC.len())? != MAGIC {
        return Err("not a kiln object (bad magic)".into());
    }
    let format = r.u32()?;
    if format != FORMAT_VERSION {
        return Err(format!(
            "format version {format}, expected {FORMAT_VERSION}"
        ));
    }
    for (what, want) in [
        ("kiln version", KILN_VERSION),
        ("backend", key.backend),
        ("target", key.target),
    ] {
        let n = r.u32()? as usize;
        let got = r.take(n)?;
        if got != want.as_bytes() {
            return Err(format!(
                "{what} {:?}, expected {want:?}",
                String::from_utf8_lossy(got)
            ));
        }
    }
    let hash = u128::from_le_bytes(r.array()?);
    if hash != key.kernel.0 {
        return Err(format!("kernel hash {hash:032x}, expected {}", key.kernel));
    }
    let n = r.u64()?;
    let sum = r.u64()?;
    let rest = (data.len() - r.pos) as u64;
    if n != rest {
        return Err(format!("payload length {n}, but {rest} bytes follow"));
    }
    if xxhash_rust::xxh3::xxh3_64(&data[r.pos..]) != sum {
        return Err("payload checksum mismatch".into());
    }
    Ok(r.pos)
}

struct Reader<'d> {
    data: &'d [u8],
    pos: usize,
}

impl<'d> Reader<'d> {
    fn take(&mut self, n: usize) -> Result<&'d [u8], String> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.data.len())
            .ok_or_else(|| format!("truncated at byte {}", self.data.len()))?;
        let s = &self.data[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], String> {
        Ok(self.take(N)?.try_into().expect("take returned N bytes"))
    }
    fn u32(&mut self) -> Result<u32, String> {
        self.array().map(u32::from_le_bytes)
    }
    fn u64(&mut self) -> Result<u64, String> {
        self.array().map(u64::from_le_bytes)
    }
}

/// A fresh name next to `path`: the pid separates processes, the counter threads of this one,
/// the clock a pid reused after a crash left a temp file behind (create_new refuses clashes).
fn temp_path(path: &Path) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    path.with_file_name(format!(".{name}.{}-{n}-{nanos}.tmp", std::process::id()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;

    /// A unique folder under the system temp dir, removed on drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(tag: &str) -> TempDir {
            static N: AtomicUsize = AtomicUsize::new(0);
            let n = N.fetch_add(1, Ordering::Relaxed);
            let p = std::env::temp_dir()
                .join(format!("kiln-diskcache-{tag}-{}-{n}", std::process::id()));
            let _ = fs::remove_dir_all(&p);
            fs::create_dir_all(&p).unwrap();
            TempDir(p)
        }
        fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn key(target: &str) -> Key<'_> {
        Key {
            kernel: KernelHash(0x0123_4567_89ab_cdef_fedc_ba98_7654_3210),
            backend: "llvm",
            target,
        }
    }

    /// Names in `dir`, sorted.
    fn listing(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn round_trip() {
        let t = TempDir::new("roundtrip");
        let k = key("skylake +avx2,+fma llvm-20");
        for payload in [&b""[..], b"x", &[0xA5u8; 10_000][..]] {
            store_in(t.path(), &k, payload).unwrap();
            assert_eq!(load_from(t.path(), &k).as_deref(), Some(payload));
        }
        // one final file, no temp files left behind
        assert_eq!(listing(t.path()).len(), 1);
    }

    #[test]
    fn file_name_shape() {
        let d = Path::new("/cache");
        let k = Key {
            kernel: KernelHash(0xab),
            backend: "ll vm/../é",
            target: "t",
        };
        let p = file_path(d, &k);
        assert_eq!(p.parent(), Some(d));
        let name = p.file_name().unwrap().to_str().unwrap();
        let rest = name
            .strip_prefix("000000000000000000000000000000ab-ll_vm_____-")
            .unwrap_or_else(|| panic!("unexpected name {name}"));
        let hex = rest.strip_suffix(".kobj").unwrap();
        assert_eq!(hex.len(), 16);
        assert!(hex.bytes().all(|b| b.is_ascii_hexdigit()));
        // the target is in the name (via its hash), so targets get different files
        assert_ne!(file_path(d, &k), file_path(d, &Key { target: "u", ..k }));
        // a long backend is cut in the name
        let long = "b".repeat(500);
        let n = file_path(
            d,
            &Key {
                backend: &long,
                ..k
            },
        );
        assert!(n.file_name().unwrap().len() < 100);
    }

    #[test]
    fn key_mismatch_misses() {
        let t = TempDir::new("mismatch");
        let k = key("target-a");
        store_in(t.path(), &k, b"payload").unwrap();
        let others = [
            Key {
                kernel: KernelHash(k.kernel.0 ^ 1),
                ..k
            },
            Key {
                backend: "cranelift",
                ..k
            },
            Key {
                backend: "ll-vm",
                ..k
            },
            Key {
                backend: "ll_vm",
                ..k
            },
            Key {
                target: "target-b",
                ..k
            },
        ];
        for o in &others {
            // nothing under that name yet (or only a copy made for another key): a miss
            assert_eq!(load_from(t.path(), o), None, "{o:?}");
            // same bytes under the other key's name: the content check must catch it
            fs::copy(file_path(t.path(), &k), file_path(t.path(), o)).unwrap();
            assert_eq!(load_from(t.path(), o), None, "{o:?}");
        }
        assert_eq!(load_from(t.path(), &k).as_deref(), Some(&b"payload"[..]));
    }

    #[test]
    fn names_that_collide_after_sanitising_still_miss() {
        let t = TempDir::new("collide");
        let a = Key {
            backend: "ll-vm",
            ..key("x")
        };
        let b = Key {
            backend: "ll.vm",
            ..a
        };
        assert_eq!(file_path(t.path(), &a), file_path(t.path(), &b));
        store_in(t.path(), &a, b"A").unwrap();
        assert_eq!(load_from(t.path(), &b), None);
        assert_eq!(load_from(t.path(), &a).as_deref(), Some(&b"A"[..]));
    }

    #[test]
    fn every_truncation_misses() {
        let t = TempDir::new("trunc");
        let k = key("t");
        store_in(t.path(), &k, b"some object code").unwrap();
        let path = file_path(t.path(), &k);
        let full = fs::read(&path).unwrap();
        for n in 0..full.len() {
            fs::write(&path, &full[..n]).unwrap();
            assert_eq!(load_from(t.path(), &k), None, "truncated to {n}");
        }
        // and one byte too many
        let mut longer = full.clone();
        longer.push(0);
        fs::write(&path, &longer).unwrap();
        assert_eq!(load_from(t.path(), &k), None);
        fs::write(&path, &full).unwrap();
        assert!(load_from(t.path(), &k).is_some());
    }

    #[test]
    fn every_flipped_byte_misses() {
        let t = TempDir::new("flip");
        let k = key("t");
        let payload = b"0123456789abcdef";
        store_in(t.path(), &k, payload).unwrap();
        let path = file_path(t.path(), &k);
        let full = fs::read(&path).unwrap();
        assert_eq!(full.len(), header_len(&k, KILN_VERSION) + payload.len());
        // every byte of the file, header and payload alike, is checked
        for i in 0..full.len() {
            for bit in [0x01u8, 0x80] {
                let mut bad = full.clone();
                bad[i] ^= bit;
                fs::write(&path, &bad).unwrap();
                assert_eq!(load_from(t.path(), &k), None, "byte {i} ^ {bit:#x}");
            }
        }
    }

    #[test]
    fn garbage_and_foreign_files_miss() {
        let t = TempDir::new("garbage");
        let k = key("t");
        let path = file_path(t.path(), &k);
        let payload = b"code";
        let forged = |version: &str, format: u32| {
            let mut f = encode_header(&k, version, format, payload);
            f.extend_from_slice(payload);
            f
        };
        // sanity: the forger makes a loadable file with the real values
        fs::write(&path, forged(KILN_VERSION, FORMAT_VERSION)).unwrap();
        assert_eq!(load_from(t.path(), &k).as_deref(), Some(&payload[..]));

        let mut other_magic = forged(KILN_VERSION, FORMAT_VERSION);
        other_magic[..8].copy_from_slice(b"\x7fELF\x02\x01\x01\x00");
        let garbage: Vec<u8> = (0..4096u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 24) as u8)
            .collect();
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("empty", vec![]),
            ("magic only", MAGIC.to_vec()),
            ("garbage", garbage),
            ("text", b"hello, this is not a kernel\n".to_vec()),
            ("elf", other_magic),
            ("other kiln", forged("0.0.0-other", FORMAT_VERSION)),
            ("other format", forged(KILN_VERSION, FORMAT_VERSION + 1)),
        ];
        for (what, bytes) in cases {
            fs::write(&path, &bytes).unwrap();
            assert_eq!(load_from(t.path(), &k), None, "{what}");
        }
        // a folder where the file should be
        fs::remove_file(&path).unwrap();
        fs::create_dir(&path).unwrap();
        assert_eq!(load_from(t.path(), &k), None);
        // a missing folder
        assert_eq!(load_from(&t.path().join("nope"), &k), None);
    }

    #[test]
    fn store_replaces_existing_file() {
        let t = TempDir::new("replace");
        let k = key("t");
        store_in(t.path(), &k, &[1u8; 5000]).unwrap();
        store_in(t.path(), &k, b"short").unwrap();
        assert_eq!(load_from(t.path(), &k).as_deref(), Some(&b"short"[..]));
        // also over a corrupt file
        fs::write(file_path(t.path(), &k), b"junk").unwrap();
        store_in(t.path(), &k, b"fixed").unwrap();
        assert_eq!(load_from(t.path(), &k).as_deref(), Some(&b"fixed"[..]));
        assert_eq!(listing(t.path()).len(), 1);
    }

    #[test]
    fn concurrent_stores_and_loads_never_see_a_mix() {
        let t = TempDir::new("concurrent");
        let k = key("t");
        // different lengths and contents, large enough that a torn write would be visible
        let payloads: Arc<Vec<Vec<u8>>> = Arc::new(
            (0..8u8)
                .map(|i| vec![i.wrapping_mul(37).wrapping_add(1); 200_000 + i as usize * 4099])
                .collect(),
        );
        let done = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(AtomicUsize::new(0));
        // set once some store has finished: from then on a file must always be there, whole
        let stored = Arc::new(AtomicBool::new(false));
        std::thread::scope(|s| {
            let readers: Vec<_> = (0..4)
                .map(|_| {
                    let (payloads, done, seen) = (payloads.clone(), done.clone(), seen.clone());
                    let stored = stored.clone();
                    let dir = t.path();
                    s.spawn(move || {
                        while !done.load(Ordering::Relaxed) {
                            let must_exist = stored.load(Ordering::SeqCst);
                            match load_from(dir, &k) {
                                Some(got) => {
                                    assert!(
                                        payloads.contains(&got),
                                        "load saw a payload that no store wrote ({} bytes)",
                                        got.len()
                                    );
                                    seen.fetch_add(1, Ordering::Relaxed);
                                }
                                // an in-place (non-atomic) write would show up here
                                None => assert!(!must_exist, "file vanished or torn mid-store"),
                            }
                        }
                    })
                })
                .collect();
            let writers: Vec<_> = (0..8)
                .map(|i| {
                    let (payloads, stored) = (payloads.clone(), stored.clone());
                    let dir = t.path();
                    s.spawn(move || {
                        for _ in 0..20 {
                            store_in(dir, &k, &payloads[i]).unwrap();
                            stored.store(true, Ordering::SeqCst);
                        }
                    })
                })
                .collect();
            for w in writers {
                w.join().unwrap();
            }
            done.store(true, Ordering::Relaxed);
            for r in readers {
                r.join().unwrap();
            }
        });
        let last = load_from(t.path(), &k).expect("a complete file remains");
        assert!(payloads.contains(&last));
        assert!(seen.load(Ordering::Relaxed) > 0, "readers never saw a file");
        assert_eq!(listing(t.path()).len(), 1, "temp files left behind");
    }

    #[test]
    fn store_into_unwritable_folder_errs() {
        let t = TempDir::new("unwritable");
        let file = t.path().join("a-file");
        fs::write(&file, b"").unwrap();
        let k = key("t");
        // a folder under a regular file can't be created, even by root
        let bad = file.join("sub");
        assert!(store_in(&bad, &k, b"x").is_err());
        assert_eq!(load_from(&bad, &k), None);
        assert!(store_in(&file, &k, b"x").is_err());
    }

    #[test]
    fn failed_rename_leaves_no_temp_file() {
        let t = TempDir::new("rename");
        let k = key("t");
        // a non-empty folder at the final name: the rename must fail
        let path = file_path(t.path(), &k);
        fs::create_dir(&path).unwrap();
        fs::write(path.join("x"), b"").unwrap();
        assert!(store_in(t.path(), &k, b"payload").is_err());
        assert_eq!(
            listing(t.path()),
            vec![path.file_name().unwrap().to_string_lossy().into_owned()]
        );
    }

    #[test]
    fn oversized_payload_is_refused() {
        let t = TempDir::new("big");
        let k = key("t");
        // calloc'd and never touched: cheap, because the size is checked before anything else
        let big = vec![0u8; MAX_PAYLOAD + 1];
        let e = store_in(t.path(), &k, &big).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(listing(t.path()).is_empty());
        // refusal is about the payload, not the folder: the cache stays on
        let s = Store::new(Some(t.path().to_path_buf()));
        assert_eq!(s.store(&k, &big), Outcome::Refused);
        assert_eq!(s.store(&k, b"small"), Outcome::Stored);
        assert_eq!(s.load(&k).as_deref(), Some(&b"small"[..]));
    }

    #[test]
    fn failing_folder_warns_once_and_disables() {
        let t = TempDir::new("disable");
        let blocker = t.path().join("blocker");
        fs::write(&blocker, b"").unwrap();
        let cache = blocker.join("kiln");
        let s = Store::new(Some(cache.clone()));
        let k = key("t");
        assert_eq!(s.dir(), Some(cache.as_path()));
        assert_eq!(s.store(&k, b"x"), Outcome::FailedAndDisabled);
        assert_eq!(s.dir(), None);
        // the folder would work now, but the process has given up on it
        fs::remove_file(&blocker).unwrap();
        assert_eq!(s.store(&k, b"x"), Outcome::Skipped);
        assert_eq!(s.load(&k), None);
        assert!(!cache.exists(), "a disabled store touched the disk");
    }

    #[test]
    fn concurrent_failures_warn_exactly_once() {
        let t = TempDir::new("failonce");
        let blocker = t.path().join("blocker");
        fs::write(&blocker, b"").unwrap();
        let s = Store::new(Some(blocker.join("kiln")));
        let barrier = std::sync::Barrier::new(8);
        let outcomes: Vec<Outcome> = std::thread::scope(|sc| {
            let hs: Vec<_> = (0..8u128)
                .map(|i| {
                    let (s, barrier) = (&s, &barrier);
                    sc.spawn(move || {
                        barrier.wait();
                        let k = Key {
                            kernel: KernelHash(i),
                            ..key("t")
                        };
                        s.store(&k, b"x")
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let warned = outcomes
            .iter()
            .filter(|&&o| o == Outcome::FailedAndDisabled)
            .count();
        assert_eq!(warned, 1, "{outcomes:?}");
        assert!(outcomes.iter().all(|o| matches!(
            o,
            Outcome::FailedAndDisabled | Outcome::Failed | Outcome::Skipped
        )));
    }

    #[test]
    fn disabled_store_does_nothing() {
        let s = Store::new(None);
        let k = key("t");
        assert_eq!(s.store(&k, b"x"), Outcome::Skipped);
        assert_eq!(s.load(&k), None);
        assert_eq!(s.dir(), None);
    }

    #[test]
    fn warning_names_folder_error_and_fix() {
        let e = io::Error::from(io::ErrorKind::PermissionDenied);
        let m = unwritable_message(Path::new("/ro/kiln"), &e);
        assert!(m.contains("/ro/kiln"), "{m}");
        assert!(m.contains(&e.to_string()), "{m}");
        assert!(m.contains("KILN_CACHE_DIR"), "{m}");
        assert!(m.contains("KILN_DISK_CACHE=0"), "{m}");
    }

    #[test]
    fn folder_resolution_from_env() {
        let run = |vars: &[(&str, &str)]| {
            let m: HashMap<String, OsString> = vars
                .iter()
                .map(|(k, v)| (k.to_string(), OsString::from(v)))
                .collect();
            resolve(|name| m.get(name).cloned())
        };
        let p = |s: &str| Some(PathBuf::from(s));
        let all = [
            ("KILN_CACHE_DIR", "/explicit"),
            ("XDG_CACHE_HOME", "/xdg"),
            ("HOME", "/home/u"),
        ];
        assert_eq!(run(&all), p("/explicit"));
        for off in ["0", "false", "off", "OFF", " False "] {
            let mut v = all.to_vec();
            v.push(("KILN_DISK_CACHE", off));
            assert_eq!(run(&v), None, "KILN_DISK_CACHE={off:?}");
        }
        for on in ["1", "true", ""] {
            let mut v = all.to_vec();
            v.push(("KILN_DISK_CACHE", on));
            assert_eq!(run(&v), p("/explicit"), "KILN_DISK_CACHE={on:?}");
        }
        assert_eq!(run(&[("KILN_CACHE_DIR", "rel/dir")]), p("rel/dir"));
        assert_eq!(
            run(&[("KILN_CACHE_DIR", ""), ("XDG_CACHE_HOME", "/xdg")]),
            p("/xdg/kiln")
        );
        assert_eq!(
            run(&[("XDG_CACHE_HOME", "/xdg"), ("HOME", "/h")]),
            p("/xdg/kiln")
        );
        // a relative or empty XDG_CACHE_HOME is ignored, per the XDG spec
        assert_eq!(
            run(&[("XDG_CACHE_HOME", "rel"), ("HOME", "/h")]),
            p("/h/.cache/kiln")
        );
        assert_eq!(
            run(&[("XDG_CACHE_HOME", ""), ("HOME", "/h")]),
            p("/h/.cache/kiln")
        );
        assert_eq!(run(&[("HOME", "/h")]), p("/h/.cache/kiln"));
        assert_eq!(run(&[("HOME", "")]), None);
        assert_eq!(run(&[]), None);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]
        #[test]
        fn round_trip_any_key(
            kernel in proptest::prelude::any::<u128>(),
            backend in ".{0,40}",
            target in ".{0,80}",
            payload in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512),
        ) {
            let t = TempDir::new("prop");
            let k = Key { kernel: KernelHash(kernel), backend: &backend, target: &target };
            store_in(t.path(), &k, &payload).unwrap();
            proptest::prop_assert_eq!(load_from(t.path(), &k), Some(payload));
            let name = file_path(t.path(), &k);
            let name = name.file_name().unwrap().to_str().unwrap();
            proptest::prop_assert!(name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.'));
        }
    }

    #[test]
    fn trim_removes_the_least_recently_used_files_first() {
        use std::time::{Duration, SystemTime};
        let d = TempDir::new("trim");
        let keys: Vec<Key> = (0..6u128)
            .map(|h| Key {
                kernel: KernelHash(h),
                backend: "llvm",
                target: "t",
            })
            .collect();
        for k in &keys {
            store_in(d.path(), k, &[7u8; 4000]).unwrap();
        }
        let other = d.path().join("notes.txt");
        fs::write(&other, vec![0u8; 100_000]).unwrap();
        // ages: key 0 oldest … key 5 newest; then key 1 is used (a load refreshes it)
        let now = SystemTime::now();
        for (i, k) in keys.iter().enumerate() {
            let f = fs::File::options()
                .append(true)
                .open(file_path(d.path(), k))
                .unwrap();
            f.set_modified(now - Duration::from_secs(100 - i as u64 * 10))
                .unwrap();
        }
        assert!(load_from(d.path(), &keys[1]).is_some());
        let size = fs::metadata(file_path(d.path(), &keys[0])).unwrap().len();
        // room for four files: the two least recently used go (0 and 2), down to 80% = 3.2 files
        let removed = trim(d.path(), 4 * size).unwrap();
        let left: Vec<bool> = keys
            .iter()
            .map(|k| file_path(d.path(), k).exists())
            .collect();
        assert_eq!(left, [false, true, false, false, true, true]);
        assert_eq!(removed, 3 * size);
        assert!(other.exists(), "files that are not cache entries stay");
        // under the limit: nothing to do
        assert_eq!(trim(d.path(), 100 * size).unwrap(), 0);
    }

    #[test]
    fn the_store_trims_at_its_first_write() {
        let d = TempDir::new("trimstore");
        let mut st = Store::new(Some(d.path().to_path_buf()));
        for h in 0..10u128 {
            let k = Key {
                kernel: KernelHash(h),
                backend: "llvm",
                target: "t",
            };
            store_in(d.path(), &k, &[1u8; 2000]).unwrap();
        }
        st.max_bytes = 5000;
        let k = Key {
            kernel: KernelHash(99),
            backend: "llvm",
            target: "t",
        };
        assert_eq!(st.store(&k, &[2u8; 100]), Outcome::Stored);
        let total: u64 = fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len())
            .sum();
        assert!(total <= 5000, "{total}");
        // a trim ran just now: the next process's first store leaves the folder alone
        for h in 100..110u128 {
            let k = Key {
                kernel: KernelHash(h),
                backend: "llvm",
                target: "t",
            };
            store_in(d.path(), &k, &[1u8; 2000]).unwrap();
        }
        let st2 = Store {
            max_bytes: 5000,
            ..Store::new(Some(d.path().to_path_buf()))
        };
        assert_eq!(st2.store(&k, &[3u8; 100]), Outcome::Stored);
        let files = fs::read_dir(d.path()).unwrap().count();
        assert!(files >= 11, "trimmed again too soon: {files} files left");
    }
}

//! Finding and loading ONNX Runtime's shared library, once per process.
//!
//! The worker links no ONNX Runtime: it opens `libonnxruntime.so` at run time (the `ort`
//! crate's `load-dynamic`), from the path the operator gives, or else from where `cargo xtask`
//! puts the one it takes out of the `onnxruntime` wheel on PyPI (target/onnxruntime/, beside
//! the target/release and target/debug folders the worker runs from). The crate speaks ONNX
//! Runtime 1.31's C API, so an older library is refused with its version named.

use std::{
    path::{Path, PathBuf},
    sync::OnceLock,
};

use ort::environment::Environment;

/// The file name `cargo xtask` gives the library it takes out of the wheel.
pub const LIBRARY_FILE: &str = "libonnxruntime.so";

/// What to do when no library is found.
pub const HOW_TO_GET_ONE: &str = "give --onnxruntime PATH to a libonnxruntime.so of ONNX \
     Runtime 1.31 or later (the onnxruntime wheel on PyPI holds one in onnxruntime/capi/), or \
     run `cargo xtask demo` or `cargo xtask test` once, which put one in target/onnxruntime/";

/// The library this process loaded, and the environment every session is created in.
pub struct Loaded {
    pub path: PathBuf,
    pub version: String,
    pub(crate) environment: Environment,
}

impl std::fmt::Debug for Loaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loaded")
            .field("path", &self.path)
            .field("version", &self.version)
            .finish()
    }
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum LibraryError {
    #[error("no ONNX Runtime library found (looked for {looked}); {HOW_TO_GET_ONE}")]
    NotFound { looked: String },
    #[error("cannot load ONNX Runtime from {path}: {reason}; {HOW_TO_GET_ONE}")]
    Load { path: PathBuf, reason: String },
    #[error(
        "ONNX Runtime is already loaded from {loaded}; one process loads one library, so \
         {asked} cannot be used too"
    )]
    Another { loaded: PathBuf, asked: PathBuf },
}

static LOADED: OnceLock<Result<Loaded, LibraryError>> = OnceLock::new();

/// Where the library is looked for when no path is given: beside the worker's binary, then in
/// target/onnxruntime/ when the binary runs from target/<profile>/.
pub fn default_candidates() -> Vec<PathBuf> {
    let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(Path::to_path_buf))
    else {
        return Vec::new();
    };
    let mut candidates = vec![dir.join(LIBRARY_FILE)];
    if let Some(target) = dir.parent() {
        candidates.push(target.join("onnxruntime").join(LIBRARY_FILE));
    }
    candidates
}

/// The first of `candidates` that exists.
pub fn find(candidates: &[PathBuf]) -> Result<PathBuf, LibraryError> {
    candidates
        .iter()
        .find(|path| path.is_file())
        .cloned()
        .ok_or_else(|| LibraryError::NotFound {
            looked: candidates
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// Loads the library at `path`, or returns the one already loaded when it is the same file.
pub fn load(path: &Path) -> Result<&'static Loaded, LibraryError> {
    let loaded = LOADED.get_or_init(|| load_once(path));
    match loaded {
        Ok(loaded) if same_file(&loaded.path, path) => Ok(loaded),
        Ok(loaded) => Err(LibraryError::Another {
            loaded: loaded.path.clone(),
            asked: path.to_owned(),
        }),
        Err(err) => Err(err.clone()),
    }
}

/// The library this process loaded, if it did.
pub fn loaded() -> Option<&'static Loaded> {
    LOADED.get().and_then(|l| l.as_ref().ok())
}

fn same_file(a: &Path, b: &Path) -> bool {
    a == b || std::fs::canonicalize(a).ok() == std::fs::canonicalize(b).ok()
}

fn load_once(path: &Path) -> Result<Loaded, LibraryError> {
    let failed = |reason: String| LibraryError::Load {
        path: path.to_owned(),
        reason,
    };
    if !path.is_file() {
        return Err(failed("no such file".to_owned()));
    }
    // init_from checks the library's version against the C API this crate speaks before
    // anything calls into it.
    let environment = ort::init_from(path)
        .map_err(|e| failed(e.to_string()))?
        .with_name("reamer-inference-worker")
        .with_telemetry(false)
        .build()
        .map_err(|e| failed(e.to_string()))?;
    Ok(Loaded {
        path: path.to_owned(),
        version: library_version(path).unwrap_or_else(|| "of unknown version".to_owned()),
        environment,
    })
}

/// The version the library at `path`, already loaded, says it is (`OrtApiBase`'s
/// `GetVersionString`, "1.31.1"): the build string that `ort::info` returns names a commit,
/// not a release.
fn library_version(path: &Path) -> Option<String> {
    use std::{ffi::CStr, os::unix::ffi::OsStrExt as _};
    let path = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: RTLD_NOLOAD only returns a handle to a library this process has loaded already
    // (ort::init_from did); it runs no initializer.
    let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
    if handle.is_null() {
        return None;
    }
    // SAFETY: the handle is valid; the name is a NUL-terminated literal.
    let symbol = unsafe { libc::dlsym(handle, c"OrtGetApiBase".as_ptr()) };
    let version = (!symbol.is_null()).then(|| {
        // SAFETY: OrtGetApiBase has this signature in every ONNX Runtime release, and returns
        // a pointer to a static struct whose GetVersionString returns a static C string.
        unsafe {
            let get_api_base: unsafe extern "C" fn() -> *const ort::sys::OrtApiBase =
                std::mem::transmute(symbol);
            let base = get_api_base();
            CStr::from_ptr(((*base).GetVersionString)())
                .to_string_lossy()
                .into_owned()
        }
    });
    // SAFETY: the handle came from dlopen above; the library stays loaded by ort's own handle.
    unsafe { libc::dlclose(handle) };
    version
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_names_where_it_was_looked_for_and_what_to_do() {
        let err = find(&[
            PathBuf::from("/nonexistent/a.so"),
            PathBuf::from("/nonexistent/b.so"),
        ])
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("/nonexistent/a.so, /nonexistent/b.so"),
            "{err}"
        );
        assert!(err.contains("--onnxruntime"), "{err}");
    }
}

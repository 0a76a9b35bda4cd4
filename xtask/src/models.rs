//! The real models the demo, the tests and the benchmark run; ONNX Runtime's shared library,
//! which the worker loads at run time; and the Python ONNX Runtime the benchmark measures the
//! worker against. All come from PyPI, the registry this machine reaches; nothing is fetched
//! from a model hub or at build time.
//!
//! rapidocr-onnxruntime 1.4.4 ships PaddleOCR's pretrained PP-OCR CNNs as ONNX files inside its
//! wheel: the text-direction classifier and the recognizer are served here (the detector has
//! open height and width, and tract runs it about 5x slower than ONNX Runtime).

use std::path::PathBuf;

use anyhow::{Context as _, bail};

use crate::{
    bootstrap::{run, say, succeeds},
    cargo::workspace_root,
};

const WHEEL: &str = "rapidocr-onnxruntime==1.4.4";
const ONNXRUNTIME: &str = "onnxruntime==1.31.1";
const NUMPY: &str = "numpy==2.4.6";

/// A model of the wheel, with the item shape it is served at.
pub struct Shipped {
    pub name: &'static str,
    pub file: &'static str,
    /// Channels, height, width: the classifier's native 48x192; the recognizer at 48x320,
    /// the width rapidocr feeds it.
    pub input_shape: &'static str,
}

pub const CLASSIFIER: Shipped = Shipped {
    name: "pp-ocr-cls",
    file: "ch_ppocr_mobile_v2.0_cls_infer.onnx",
    input_shape: "3,48,192",
};
pub const RECOGNIZER: Shipped = Shipped {
    name: "pp-ocr-rec",
    file: "ch_PP-OCRv4_rec_infer.onnx",
    input_shape: "3,48,320",
};
pub const SHIPPED: [Shipped; 2] = [CLASSIFIER, RECOGNIZER];

/// Where the extracted models are cached (the tests look there too).
pub fn models_dir() -> PathBuf {
    workspace_root().join("target/models/pp-ocr")
}

pub fn path_of(model: &Shipped) -> PathBuf {
    models_dir().join(model.file)
}

/// Downloads the wheel `requirement` ("name==version", for this machine's Python and
/// platform) from PyPI into target/models/wheels/, and returns that folder.
fn download_wheel(requirement: &str) -> anyhow::Result<PathBuf> {
    let wheels = workspace_root().join("target/models/wheels");
    std::fs::create_dir_all(&wheels)?;
    run(
        "python3",
        &[
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--only-binary=:all:",
            requirement,
            "-d",
            wheels.to_str().context("path")?,
        ],
        &[],
    )
    .with_context(|| format!("fetching {requirement} needs python3 with pip and access to PyPI"))?;
    Ok(wheels)
}

/// Fetches the wheel and extracts its models, once.
pub fn ensure_models() -> anyhow::Result<PathBuf> {
    let dir = models_dir();
    if SHIPPED.iter().all(|m| path_of(m).exists()) {
        return Ok(dir);
    }
    say(&format!(
        "fetching the PP-OCR models from PyPI ({WHEEL}, about 15 MB) into {}",
        dir.display()
    ));
    let wheels = download_wheel(WHEEL)?;
    let wheels_arg = wheels.to_str().context("path")?;
    std::fs::create_dir_all(&dir)?;
    // A wheel is a zip: take the .onnx members, nothing else.
    let extract = "import glob, os, sys, zipfile\n\
                   wheel = glob.glob(os.path.join(sys.argv[1], 'rapidocr_onnxruntime-*.whl'))[0]\n\
                   with zipfile.ZipFile(wheel) as z:\n\
                   \x20   for member in z.namelist():\n\
                   \x20       if member.endswith('.onnx'):\n\
                   \x20           with open(os.path.join(sys.argv[2], os.path.basename(member)), 'wb') as out:\n\
                   \x20               out.write(z.read(member))\n";
    run(
        "python3",
        &["-c", extract, wheels_arg, dir.to_str().context("path")?],
        &[],
    )?;
    for model in &SHIPPED {
        if !path_of(model).exists() {
            bail!("the wheel {WHEEL} has no {}", model.file);
        }
    }
    Ok(dir)
}

/// Where the worker finds ONNX Runtime's library when it runs from target/<profile>/ (the
/// worker's own default: `ort_library::default_candidates`).
pub fn onnxruntime_library() -> PathBuf {
    workspace_root().join("target/onnxruntime/libonnxruntime.so")
}

/// Takes ONNX Runtime's shared library out of the pinned onnxruntime wheel, once. The version
/// taken is written beside it, so that a new pin fetches again.
pub fn ensure_onnxruntime_library() -> anyhow::Result<PathBuf> {
    let library = onnxruntime_library();
    let dir = library.parent().context("path")?.to_owned();
    let stamp = dir.join("version");
    let version = ONNXRUNTIME.trim_start_matches("onnxruntime==");
    if library.exists() && std::fs::read_to_string(&stamp).is_ok_and(|v| v.trim() == version) {
        return Ok(library);
    }
    say(&format!(
        "fetching ONNX Runtime's library ({ONNXRUNTIME}, the wheel from PyPI) into {}",
        dir.display()
    ));
    let wheels = download_wheel(ONNXRUNTIME)?;
    let wheels_arg = wheels.to_str().context("path")?;
    std::fs::create_dir_all(&dir)?;
    // The wheel's onnxruntime/capi/libonnxruntime.so.<version>: the C API library alone (the
    // Python binding beside it is not needed). Written under a temporary name, then renamed,
    // so that a cut-short extraction is never taken for the library.
    let extract = "import glob, os, sys, zipfile\n\
                   wheel = glob.glob(os.path.join(sys.argv[1], 'onnxruntime-' + sys.argv[2] + '-*.whl'))[0]\n\
                   with zipfile.ZipFile(wheel) as z:\n\
                   \x20   member = 'onnxruntime/capi/libonnxruntime.so.' + sys.argv[2]\n\
                   \x20   with open(sys.argv[3] + '.part', 'wb') as out:\n\
                   \x20       out.write(z.read(member))\n\
                   os.replace(sys.argv[3] + '.part', sys.argv[3])\n";
    run(
        "python3",
        &[
            "-c",
            extract,
            wheels_arg,
            version,
            library.to_str().context("path")?,
        ],
        &[],
    )
    .with_context(|| format!("taking the library out of the {ONNXRUNTIME} wheel"))?;
    std::fs::write(&stamp, version)?;
    Ok(library)
}

/// A Python with ONNX Runtime, in a virtual environment under target/, created once.
pub fn ensure_onnxruntime() -> anyhow::Result<PathBuf> {
    let venv = workspace_root().join("target/ort-venv");
    let python = venv.join("bin/python");
    let python_str = python.to_str().context("path")?;
    let check = format!(
        "import onnxruntime; assert onnxruntime.__version__ == '{}'",
        ONNXRUNTIME.trim_start_matches("onnxruntime==")
    );
    if succeeds(python_str, &["-c", &check]) {
        return Ok(python);
    }
    say(&format!(
        "installing the ONNX Runtime baseline ({ONNXRUNTIME}, {NUMPY}) from PyPI into {}",
        venv.display()
    ));
    run(
        "python3",
        &["-m", "venv", venv.to_str().context("path")?],
        &[],
    )
    .context("creating the ONNX Runtime environment needs python3 with venv")?;
    run(
        python_str,
        &["-m", "pip", "install", "--quiet", ONNXRUNTIME, NUMPY],
        &[],
    )?;
    Ok(python)
}

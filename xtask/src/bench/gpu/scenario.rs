//! The GPU benchmark's training jobs and scenarios, with their names in the saved run and
//! their labels in the report.

use serde::{Deserialize, Serialize};

use super::STATIC_PERCENTAGE;

/// Training's job (`gpu_load.py --job`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum TrainingJob {
    /// A bf16 MLP whose steps are all GPU work: GPU-bound.
    Mlp,
    /// torchvision ResNet-50 fed by a DataLoader of `--loader-workers` processes that
    /// augment images on the CPU: its input pipeline sets its pace.
    Resnet50Loader,
}

impl TrainingJob {
    /// `gpu_load.py --job`'s name for it.
    pub fn arg(self) -> &'static str {
        match self {
            TrainingJob::Mlp => "mlp",
            TrainingJob::Resnet50Loader => "resnet50-loader",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            TrainingJob::Mlp => "GPU-bound training: a bf16 MLP",
            TrainingJob::Resnet50Loader => {
                "Loader-bound training: ResNet-50 fed by a CPU DataLoader"
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scenario {
    TrainingAlone,
    Shared,
    StaticMpsLimit,
    Reamer,
}

impl Scenario {
    pub const ALL: [Scenario; 4] = [
        Scenario::TrainingAlone,
        Scenario::Shared,
        Scenario::StaticMpsLimit,
        Scenario::Reamer,
    ];

    pub fn label(self) -> String {
        match self {
            Scenario::TrainingAlone => "training alone".to_owned(),
            Scenario::Shared => "shared, no control".to_owned(),
            Scenario::StaticMpsLimit => {
                format!("static MPS limit ({STATIC_PERCENTAGE}% for inference)")
            }
            Scenario::Reamer => "reamer (clamp by freezer duty cycle)".to_owned(),
        }
    }
}

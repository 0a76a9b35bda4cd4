//! A KServe v2 infer request body, JSON or binary, with its Inference-Header-Content-Length:
//! whatever arrives, the parser answers Ok or a BadRequest, never a panic, and what it accepts
//! holds exactly what the declared shape allows.
#![no_main]

use inference_worker::{
    kserve::parse_infer,
    model::{OutputSignature, Signature},
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    // The first byte picks the header length (0: none), as a client's header would say it.
    let Some((&first, body)) = input.split_first() else {
        return;
    };
    let header_length = (first > 0).then(|| (usize::from(first) * 4).min(body.len()).to_string());
    let signature = Signature {
        input_name: "x".to_owned(),
        input_item_shape: vec![2, 2],
        outputs: vec![
            OutputSignature {
                name: "y".to_owned(),
                item_shape: vec![3],
            },
            OutputSignature {
                name: "z".to_owned(),
                item_shape: vec![1],
            },
        ],
    };
    if let Ok(request) = parse_infer(body, header_length.as_deref(), &signature) {
        assert_eq!(request.input.len(), request.items * 4);
        assert!(request.outputs.len() <= signature.outputs.len());
    }
});

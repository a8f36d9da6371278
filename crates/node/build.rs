//! Node-API link settings for the addon.

fn main() {
    napi_build::setup();
}

//! Which crate feature reads which URL scheme.

/// Why a scheme is not readable in this build.
pub(crate) fn missing_feature(scheme: &str) -> String {
    let feature = match scheme {
        "s3" | "s3a" => "s3",
        "gs" => "gcs",
        "az" | "abfs" | "abfss" | "azure" | "adl" => "azure",
        "http" | "https" => "http",
        _ => {
            return format!(
                "unknown scheme {scheme:?} (kiln-ml-data reads file://, s3://, gs://, az://, \
                 http:// and https:// URLs)"
            );
        }
    };
    format!("kiln-ml-data was built without its `{feature}` feature, which reads {scheme}:// URLs")
}

//! The plugin's settings (`[plugins.anthropic.config]` in `reson.toml`) and
//! the price table that turns usage into a cost.

use reson_sdk::provider::{ProviderError, Usage};

/// Where the API lives unless `base_url` says otherwise.
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";
/// The secret holding the API key unless `api_key_secret` says otherwise.
pub const DEFAULT_API_KEY_SECRET: &str = "ANTHROPIC_API_KEY";

/// Everything the plugin reads from its configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// Scheme and host (and optional path prefix), without a trailing `/`.
    pub base_url: String,
    /// Name of the secret the host substitutes into `x-api-key`.
    pub api_key_secret: String,
    pub prices: Prices,
}

/// USD per million tokens of each kind; `None` where no price is set.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Prices {
    pub input: Option<f64>,
    pub output: Option<f64>,
    pub cache_read: Option<f64>,
    pub cache_write: Option<f64>,
}

impl Settings {
    /// Reads the settings through `get` (the host's `config::get`). An empty
    /// value counts as unset, so that a blanked-out line restores the
    /// default.
    pub fn load(get: impl Fn(&str) -> Option<String>) -> Result<Self, ProviderError> {
        let value = |key: &str| get(key).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
        let base_url = value("base_url").unwrap_or_else(|| DEFAULT_BASE_URL.to_owned());
        let base_url = base_url.trim_end_matches('/').to_owned();
        let api_key_secret =
            value("api_key_secret").unwrap_or_else(|| DEFAULT_API_KEY_SECRET.to_owned());
        // The name goes inside `{{secret:NAME}}`; a brace or space would
        // break the reference, and the host would then send it verbatim.
        if !api_key_secret.chars().all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c)) {
            return Err(ProviderError::Other(format!(
                "anthropic: invalid setting `api_key_secret` = {api_key_secret:?}: a secret name \
                 may hold only letters, digits, `_`, `-` and `.`"
            )));
        }
        let price = |key: &str| -> Result<Option<f64>, ProviderError> {
            let Some(text) = value(key) else { return Ok(None) };
            match text.parse::<f64>() {
                Ok(price) if price.is_finite() && price >= 0.0 => Ok(Some(price)),
                _ => Err(ProviderError::Other(format!(
                    "anthropic: invalid setting `{key}` = {text:?}: expected a non-negative \
                     number of USD per million tokens"
                ))),
            }
        };
        let prices = Prices {
            input: price("price_input_per_mtok")?,
            output: price("price_output_per_mtok")?,
            cache_read: price("price_cache_read_per_mtok")?,
            cache_write: price("price_cache_write_per_mtok")?,
        };
        Ok(Self { base_url, api_key_secret, prices })
    }

    /// The Messages API endpoint.
    pub fn messages_url(&self) -> String {
        format!("{}/v1/messages", self.base_url)
    }

    /// The `x-api-key` header value: a reference the host fills in, so the
    /// key itself never enters the plugin.
    pub fn api_key_reference(&self) -> String {
        format!("{{{{secret:{}}}}}", self.api_key_secret)
    }
}

impl Prices {
    /// The cost of `usage` in USD, or `None` when no price is set at all. A
    /// kind without a price costs nothing, so that setting only the input
    /// and output prices still gives a figure. Anthropic's input count
    /// excludes cached tokens, so the four kinds do not overlap.
    pub fn cost(&self, usage: &Usage) -> Option<f64> {
        let parts = [
            (self.input, usage.prompt_tokens),
            (self.output, usage.completion_tokens),
            (self.cache_read, usage.cache_read_tokens),
            (self.cache_write, usage.cache_write_tokens),
        ];
        if parts.iter().all(|(price, _)| price.is_none()) {
            return None;
        }
        let usd_times_million: f64 =
            parts.iter().map(|(price, tokens)| price.unwrap_or(0.0) * *tokens as f64).sum();
        Some(usd_times_million / 1_000_000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn load(pairs: &[(&str, &str)]) -> Result<Settings, ProviderError> {
        let map: HashMap<String, String> =
            pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Settings::load(|key| map.get(key).cloned())
    }

    fn usage(input: u64, output: u64, read: u64, write: u64) -> Usage {
        Usage {
            prompt_tokens: input,
            completion_tokens: output,
            reasoning_tokens: 0,
            cache_read_tokens: read,
            cache_write_tokens: write,
        }
    }

    #[test]
    fn defaults_apply_without_settings() {
        let settings = load(&[]).unwrap();
        assert_eq!(settings.base_url, "https://api.anthropic.com");
        assert_eq!(settings.messages_url(), "https://api.anthropic.com/v1/messages");
        assert_eq!(settings.api_key_secret, "ANTHROPIC_API_KEY");
        assert_eq!(settings.api_key_reference(), "{{secret:ANTHROPIC_API_KEY}}");
        assert_eq!(settings.prices, Prices::default());
    }

    #[test]
    fn settings_override_the_defaults() {
        let settings = load(&[
            ("base_url", "http://127.0.0.1:8080/proxy/"),
            ("api_key_secret", "WORK_CLAUDE_KEY"),
            ("price_input_per_mtok", "3"),
            ("price_output_per_mtok", " 15.0 "),
            ("price_cache_read_per_mtok", "0.3"),
            ("price_cache_write_per_mtok", "3.75"),
        ])
        .unwrap();
        assert_eq!(settings.messages_url(), "http://127.0.0.1:8080/proxy/v1/messages");
        assert_eq!(settings.api_key_reference(), "{{secret:WORK_CLAUDE_KEY}}");
        assert_eq!(
            settings.prices,
            Prices {
                input: Some(3.0),
                output: Some(15.0),
                cache_read: Some(0.3),
                cache_write: Some(3.75)
            }
        );
    }

    #[test]
    fn empty_values_count_as_unset() {
        let settings = load(&[("base_url", ""), ("api_key_secret", "  ")]).unwrap();
        assert_eq!(settings.base_url, DEFAULT_BASE_URL);
        assert_eq!(settings.api_key_secret, DEFAULT_API_KEY_SECRET);
    }

    #[test]
    fn bad_prices_and_secret_names_are_refused_with_the_key() {
        for bad in ["cheap", "-1", "NaN", "inf"] {
            let err = load(&[("price_output_per_mtok", bad)]).unwrap_err();
            assert!(
                matches!(&err, ProviderError::Other(m) if m.contains("`price_output_per_mtok`")),
                "{err:?}"
            );
        }
        let err = load(&[("api_key_secret", "KEY}}x{{")]).unwrap_err();
        assert!(matches!(&err, ProviderError::Other(m) if m.contains("`api_key_secret`")));
    }

    #[test]
    fn cost_is_none_without_prices_and_sums_every_kind() {
        assert_eq!(Prices::default().cost(&usage(1_000, 1_000, 0, 0)), None);
        let prices = Prices {
            input: Some(3.0),
            output: Some(15.0),
            cache_read: Some(0.3),
            cache_write: Some(3.75),
        };
        let cost = prices.cost(&usage(1_000_000, 100_000, 2_000_000, 400_000)).unwrap();
        // 3 + 1.5 + 0.6 + 1.5
        assert!((cost - 6.6).abs() < 1e-9, "{cost}");
        let only_output = Prices { output: Some(10.0), ..Prices::default() };
        assert_eq!(only_output.cost(&usage(5, 500_000, 5, 5)), Some(5.0));
    }
}

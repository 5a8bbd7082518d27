//! The plugin's settings (`[plugins.openai.config]` in `reson.toml`) and
//! the cost of a call under its price table.

use reson_sdk::provider::{ProviderError, Usage};

/// Where requests go when `base_url` is not set.
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";
/// The secret holding the API key when `api_key_secret` is not set.
pub const DEFAULT_API_KEY_SECRET: &str = "OPENAI_API_KEY";

/// The settings of one call, read afresh each time because every call runs
/// in a fresh instance.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// The API root, without a trailing `/`.
    pub base_url: String,
    /// The secret sent as the bearer token; `None` sends no `authorization`
    /// header, for local servers that take no key.
    pub api_key_secret: Option<String>,
    /// USD per million tokens.
    pub prices: Prices,
}

/// USD per million tokens of each kind; `None` where no price is set.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Prices {
    pub input: Option<f64>,
    pub output: Option<f64>,
    pub cache_read: Option<f64>,
    pub cache_write: Option<f64>,
}

impl Settings {
    /// Reads the settings through `get` (the host's `config::get`).
    ///
    /// An empty `api_key_secret` means "no key". A price that is not a
    /// non-negative number is an error rather than a silent zero, so that a
    /// typo does not under-report spending.
    pub fn from_config(get: impl Fn(&str) -> Option<String>) -> Result<Self, ProviderError> {
        let base_url = get("base_url")
            .map(|url| url.trim().trim_end_matches('/').to_owned())
            .filter(|url| !url.is_empty())
            .unwrap_or_else(|| DEFAULT_BASE_URL.to_owned());
        let api_key_secret = match get("api_key_secret") {
            None => Some(DEFAULT_API_KEY_SECRET.to_owned()),
            Some(name) if name.trim().is_empty() => None,
            Some(name) => Some(secret_name(name.trim())?),
        };
        let price = |key: &str| -> Result<Option<f64>, ProviderError> {
            let Some(text) = get(key) else { return Ok(None) };
            match text.trim().parse::<f64>() {
                Ok(value) if value.is_finite() && value >= 0.0 => Ok(Some(value)),
                _ => Err(ProviderError::Other(format!(
                    "openai: setting `{key}` must be a non-negative number of USD per million \
                     tokens, not `{text}`"
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

    /// The chat completions endpoint.
    pub fn url(&self) -> String {
        format!("{}/chat/completions", self.base_url)
    }
}

/// Checks a secret name: it is written into `{{secret:NAME}}`, so anything
/// that could end or confuse that reference is refused.
fn secret_name(name: &str) -> Result<String, ProviderError> {
    if name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')) {
        Ok(name.to_owned())
    } else {
        Err(ProviderError::Other(format!(
            "openai: setting `api_key_secret` must be a secret name (letters, digits, `_`, `-`, \
             `.`), not `{name}`"
        )))
    }
}

impl Prices {
    /// The cost of `usage` in USD, or `None` when no price is set.
    ///
    /// `prompt_tokens` includes the cached ones (as OpenAI reports it), so
    /// those are taken out of the input price and charged at their own.
    /// Cached tokens without a price of their own are charged as input:
    /// over-reporting a cost is the safer mistake.
    pub fn cost(&self, usage: &Usage) -> Option<f64> {
        if [self.input, self.output, self.cache_read, self.cache_write].iter().all(Option::is_none)
        {
            return None;
        }
        let input = self.input.unwrap_or(0.0);
        let uncached = usage
            .prompt_tokens
            .saturating_sub(usage.cache_read_tokens)
            .saturating_sub(usage.cache_write_tokens);
        let total = uncached as f64 * input
            + usage.cache_read_tokens as f64 * self.cache_read.unwrap_or(input)
            + usage.cache_write_tokens as f64 * self.cache_write.unwrap_or(input)
            + usage.completion_tokens as f64 * self.output.unwrap_or(0.0);
        Some(total / 1_000_000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn settings(pairs: &[(&str, &str)]) -> Result<Settings, ProviderError> {
        let map: BTreeMap<String, String> =
            pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        Settings::from_config(|key| map.get(key).cloned())
    }

    fn usage(prompt: u64, completion: u64, cache_read: u64, cache_write: u64) -> Usage {
        Usage {
            prompt_tokens: prompt,
            completion_tokens: completion,
            reasoning_tokens: 0,
            cache_read_tokens: cache_read,
            cache_write_tokens: cache_write,
        }
    }

    #[test]
    fn defaults_point_at_openai_with_its_key_and_no_prices() {
        let s = settings(&[]).unwrap();
        assert_eq!(s.base_url, "https://api.openai.com/v1");
        assert_eq!(s.url(), "https://api.openai.com/v1/chat/completions");
        assert_eq!(s.api_key_secret.as_deref(), Some("OPENAI_API_KEY"));
        assert_eq!(s.prices, Prices::default());
        assert_eq!(s.prices.cost(&usage(1000, 1000, 0, 0)), None);
    }

    #[test]
    fn base_url_loses_its_trailing_slash_and_an_empty_key_secret_means_no_key() {
        let s = settings(&[
            ("base_url", " http://localhost:11434/v1/ "),
            ("api_key_secret", ""),
            ("price_input_per_mtok", "2.5"),
        ])
        .unwrap();
        assert_eq!(s.url(), "http://localhost:11434/v1/chat/completions");
        assert_eq!(s.api_key_secret, None);
        assert_eq!(s.prices.input, Some(2.5));
        let s = settings(&[("api_key_secret", "OPENROUTER_API_KEY")]).unwrap();
        assert_eq!(s.api_key_secret.as_deref(), Some("OPENROUTER_API_KEY"));
    }

    #[test]
    fn bad_prices_and_secret_names_are_refused_by_name() {
        let err = settings(&[("price_output_per_mtok", "ten")]).unwrap_err();
        let ProviderError::Other(message) = &err else { panic!("{err:?}") };
        assert_eq!(
            message,
            "openai: setting `price_output_per_mtok` must be a non-negative number of USD per \
             million tokens, not `ten`"
        );
        assert!(settings(&[("price_input_per_mtok", "-1")]).is_err());
        assert!(settings(&[("price_input_per_mtok", "NaN")]).is_err());
        assert!(settings(&[("price_input_per_mtok", "inf")]).is_err());
        let err = settings(&[("api_key_secret", "KEY}}x")]).unwrap_err();
        assert!(matches!(&err, ProviderError::Other(m) if m.contains("api_key_secret")));
    }

    #[test]
    fn cost_charges_cached_tokens_at_their_own_price() {
        let prices = Prices {
            input: Some(2.5),
            output: Some(10.0),
            cache_read: Some(1.25),
            cache_write: Some(3.0),
        };
        // 1M prompt tokens of which 400k cached reads and 100k cache writes.
        let cost = prices.cost(&usage(1_000_000, 200_000, 400_000, 100_000)).unwrap();
        let expected = 0.5 * 2.5 + 0.4 * 1.25 + 0.1 * 3.0 + 0.2 * 10.0;
        assert!((cost - expected).abs() < 1e-9, "{cost} != {expected}");
    }

    #[test]
    fn cost_charges_unpriced_cache_reads_as_input_and_missing_prices_as_zero() {
        let prices = Prices { input: Some(1.0), ..Prices::default() };
        let cost = prices.cost(&usage(2_000_000, 5_000_000, 1_000_000, 0)).unwrap();
        assert!((cost - 2.0).abs() < 1e-9, "{cost}");
        let prices = Prices { output: Some(4.0), ..Prices::default() };
        let cost = prices.cost(&usage(1_000_000, 500_000, 0, 0)).unwrap();
        assert!((cost - 2.0).abs() < 1e-9, "{cost}");
        // Inconsistent counts from a server never underflow.
        let prices = Prices { input: Some(1.0), ..Prices::default() };
        let cost = prices.cost(&usage(10, 0, 50, 50)).unwrap();
        assert!((cost - 0.0001).abs() < 1e-12, "{cost}");
    }
}

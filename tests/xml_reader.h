// A minimal, strict XML reader for validating magic-check's JUnit output: elements, attributes,
// text, the five predefined entities and an optional <?xml?> prolog. Throws std::runtime_error
// with the byte offset on anything malformed (unclosed or mismatched tags, bad attributes).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace magic::testing {

struct XmlElement {
  std::string name;
  std::map<std::string, std::string> attributes;
  std::vector<std::unique_ptr<XmlElement>> children;
  std::string text;

  std::vector<const XmlElement*> all(const std::string& child_name) const;
};

std::unique_ptr<XmlElement> parse_xml(const std::string& document);

}  // namespace magic::testing

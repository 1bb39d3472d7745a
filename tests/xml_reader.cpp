#include "tests/xml_reader.h"

#include <cctype>
#include <stdexcept>

namespace magic::testing {
namespace {

class Reader {
 public:
  explicit Reader(const std::string& s) : s_(s) {}

  std::unique_ptr<XmlElement> document() {
    skip_space();
    if (s_.compare(i_, 5, "<?xml") == 0) {
      i_ = s_.find("?>", i_);
      if (i_ == std::string::npos) fail("unterminated prolog");
      i_ += 2;
    }
    skip_space();
    auto root = element();
    skip_space();
    if (i_ != s_.size()) fail("content after the root element");
    return root;
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    throw std::runtime_error("XML: " + why + " at byte " + std::to_string(i_));
  }
  void skip_space() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  void expect(char c) {
    if (i_ >= s_.size() || s_[i_] != c) fail(std::string("expected '") + c + "'");
    ++i_;
  }
  std::string name() {
    const size_t start = i_;
    while (i_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[i_])) || s_[i_] == '_' || s_[i_] == '-' ||
                              s_[i_] == ':' || s_[i_] == '.')) {
      ++i_;
    }
    if (i_ == start) fail("expected a name");
    return s_.substr(start, i_ - start);
  }
  std::string decode(const std::string& raw) const {
    std::string out;
    for (size_t k = 0; k < raw.size(); ++k) {
      if (raw[k] == '<') fail("'<' inside text or attribute");
      if (raw[k] != '&') {
        out += raw[k];
        continue;
      }
      const size_t end = raw.find(';', k);
      if (end == std::string::npos) fail("unterminated entity");
      const std::string entity = raw.substr(k + 1, end - k - 1);
      if (entity == "amp")
        out += '&';
      else if (entity == "lt")
        out += '<';
      else if (entity == "gt")
        out += '>';
      else if (entity == "quot")
        out += '"';
      else if (entity == "apos")
        out += '\'';
      else
        fail("unknown entity &" + entity + ";");
      k = end;
    }
    return out;
  }
  std::unique_ptr<XmlElement> element() {
    expect('<');
    auto e = std::make_unique<XmlElement>();
    e->name = name();
    for (;;) {
      skip_space();
      if (i_ >= s_.size()) fail("unterminated tag <" + e->name);
      if (s_[i_] == '/') {
        ++i_;
        expect('>');
        return e;
      }
      if (s_[i_] == '>') {
        ++i_;
        break;
      }
      const std::string key = name();
      skip_space();
      expect('=');
      skip_space();
      expect('"');
      const size_t end = s_.find('"', i_);
      if (end == std::string::npos) fail("unterminated attribute " + key);
      if (e->attributes.count(key)) fail("duplicate attribute " + key);
      e->attributes[key] = decode(s_.substr(i_, end - i_));
      i_ = end + 1;
    }
    for (;;) {
      const size_t lt = s_.find('<', i_);
      if (lt == std::string::npos) fail("unclosed <" + e->name + ">");
      e->text += decode(s_.substr(i_, lt - i_));
      i_ = lt;
      if (s_.compare(i_, 2, "</") == 0) {
        i_ += 2;
        if (name() != e->name) fail("mismatched closing tag for <" + e->name + ">");
        skip_space();
        expect('>');
        return e;
      }
      e->children.push_back(element());
    }
  }

  const std::string& s_;
  size_t i_ = 0;
};

}  // namespace

std::vector<const XmlElement*> XmlElement::all(const std::string& child_name) const {
  std::vector<const XmlElement*> out;
  for (const auto& c : children) {
    if (c->name == child_name) out.push_back(c.get());
  }
  return out;
}

std::unique_ptr<XmlElement> parse_xml(const std::string& document) {
  return Reader(document).document();
}

}  // namespace magic::testing

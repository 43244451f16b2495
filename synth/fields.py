"""The key fields of synthetic invoices and forms, read back from their typed blocks (for KIE and VQA).

``synth.content`` writes these pages' fields in fixed sentence and list shapes (``_invoice``,
``_form`` and the form filler's ``Label: value`` lists), so the fields the page shows are known
exactly from the spec of what it shows: ``page_fields(spec)`` returns them as an ordered
``{key: value}`` mapping with English snake-case keys in both languages (the values as printed).
Pages of other layouts have none. ``tests/synth/test_fields.py`` checks every value is on the page.
"""

from __future__ import annotations

import re

from synth.blocks import Heading, ListBlock, PageSpec, Paragraph

# Form labels (English and Chinese, as synth.content prints them) -> the field's key.
FORM_KEYS = {
    "Applicant name": "applicant_name", "申请人姓名": "applicant_name",
    "Date of application": "application_date", "申请日期": "application_date",
    "Reference number": "reference_number", "编号": "reference_number",
    "Organisation": "organisation", "所在单位": "organisation",
    "Telephone": "telephone", "电话": "telephone", "Email": "email", "电子邮箱": "email",
    "Supervisor": "supervisor", "负责人": "supervisor", "Start date": "start_date", "开始日期": "start_date",
    "End date": "end_date", "结束日期": "end_date", "Budget code": "budget_code", "预算代码": "budget_code",
    "Department": "department", "部门": "department", "Witness": "witness", "见证人": "witness",
}
# key -> (English label, Chinese label), for questions about a field (pipelines.instruct.tasks).
FIELD_LABELS: dict[str, tuple[str, str]] = {
    **{key: (en, zh) for (en, key), (zh, _) in zip(list(FORM_KEYS.items())[::2], list(FORM_KEYS.items())[1::2])},
    "invoice_number": ("invoice number", "发票号码"), "billed_to": ("name billed", "付款人"),
    "customer_organisation": ("customer organisation", "付款单位"), "issue_date": ("issue date", "开具日期"),
    "payment_terms_days": ("payment term in days", "付款期限（天）"), "total_due": ("total due", "应付总额"),
    "currency": ("currency", "币种"), "bank_reference": ("bank reference", "银行参考号"),
}
_FORM_ITEM = re.compile(r"^(?P<label>[^:：]+?)(?::\s|：)(?P<value>.+)$")
_INVOICE_NO = re.compile(r"^(?:Invoice|发票) (?P<invoice_number>INV-\d+)$")
_BILLED = (re.compile(r"^Billed to \*\*(?P<billed_to>.+?)\*\*, (?P<customer_organisation>.+?)\. Issued "
                      r"(?P<issue_date>.+?); payment due within (?P<payment_terms_days>\d+) days\.$"),
           re.compile(r"^付款方：\*\*(?P<billed_to>.+?)\*\*，(?P<customer_organisation>.+?)。开具日期"
                      r"(?P<issue_date>.+?)；请于(?P<payment_terms_days>\d+)天内付款。$"))
_TOTAL = (re.compile(r"^Total due: \*\*(?P<total_due>[\d,.]+) (?P<currency>[A-Z]{3})\*\*\. Bank reference "
                     r"(?P<bank_reference>\d{4}-\d{4})\.$"),
          re.compile(r"^应付总额：\*\*(?P<total_due>[\d,.]+) (?P<currency>元)\*\*。银行参考号"
                     r"(?P<bank_reference>\d{4}-\d{4})。$"))


def page_fields(spec: PageSpec) -> dict[str, str]:
    """The fields an invoice or form page shows, in reading order (empty for other layouts). A form label
    shown with two different values has no single answer and is left out."""
    if spec.layout not in ("invoice", "form"):
        return {}
    fields: dict[str, str] = {}
    ambiguous: set[str] = set()  # a form label shown with two values: no single answer, left out
    for pb in spec.blocks:
        b = pb.block
        if spec.layout == "invoice" and isinstance(b, Heading) and b.level == 1:
            m = _INVOICE_NO.match(b.text)
            if m:
                fields.update(m.groupdict())
        elif spec.layout == "invoice" and isinstance(b, Paragraph):
            for pattern in (*_BILLED, *_TOTAL):
                m = pattern.match(b.text)
                if m:
                    fields.update(m.groupdict())
        elif spec.layout == "form" and isinstance(b, ListBlock):
            for item in b.items:
                m = _FORM_ITEM.match(item)
                if m and m["label"] in FORM_KEYS:
                    key, value = FORM_KEYS[m["label"]], m["value"].strip()
                    if fields.setdefault(key, value) != value:
                        ambiguous.add(key)
    return {k: v for k, v in fields.items() if k not in ambiguous}
